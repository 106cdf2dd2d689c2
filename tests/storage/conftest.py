"""Fixtures: every storage test runs on SQLite (a temp file) and on a real PostgreSQL.

The PostgreSQL database comes from ``pg_database`` in tests/conftest.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from storage import ResultStore, make_engine

TABLES = "inference_results, inference_log, consumer_offsets, jobs, alembic_version"


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database URL.

    The PostgreSQL database is shared by the whole session, so it is emptied before
    (whatever ran earlier) and after each test.
    """
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    url: str = request.getfixturevalue("pg_database")
    _drop_tables(url)
    yield url
    _drop_tables(url)


def _drop_tables(url: str) -> None:
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(text(f"DROP TABLE IF EXISTS {TABLES}"))
    engine.dispose()


@pytest.fixture
def store(db_url: str) -> Iterator[ResultStore]:
    with ResultStore(db_url) as store:
        yield store
