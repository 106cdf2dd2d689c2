"""Bring a database to the newest schema with Alembic, safely from many processes."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, text

from storage.engine import begin_write

MIGRATIONS_DIR = Path(__file__).parent / "migrations"

# Any fixed number; it names the PostgreSQL advisory lock that serializes migrations.
_PG_LOCK_KEY = 0x1F_E41A_3E


def alembic_config(connection: Connection) -> Config:
    """An Alembic config for this package's migrations, bound to ``connection``.

    Built in code rather than read from an ini file, so it works from an installed wheel.
    """
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["connection"] = connection
    return config


def upgrade(engine: Engine) -> None:
    """Run ``alembic upgrade head``; a no-op when already there.

    The whole upgrade is one transaction that first takes a lock (SQLite's write lock,
    a PostgreSQL advisory lock), so workers starting together migrate once: the others
    wait, then find the schema at head.
    """
    with begin_write(engine) as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
        command.upgrade(alembic_config(conn), "head")
