"""Alembic environment: runs on the connection that ``storage.migrate`` passes in."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from storage.schema import metadata

connection = context.config.attributes.get("connection")
if not isinstance(connection, Connection):
    raise RuntimeError("run migrations through storage.migrate.upgrade(engine)")

context.configure(connection=connection, target_metadata=metadata, compare_type=True)
with context.begin_transaction():
    context.run_migrations()
