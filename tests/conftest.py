"""Session fixtures: the real embedded broker, the demo models, a PostgreSQL database."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from storage import make_engine
from storage.schema import metadata
from worker.demo.models import ensure_demo_models
from worker.intake.broker import EmbeddedBroker
from worker.models import ModelRegistry

PG_URL = os.environ.get(
    "INFERLANE_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
# Every table the migrations create; CASCADE drops the views on them too.
ALL_TABLES = ", ".join([*metadata.tables, "alembic_version"])


@pytest.fixture
def broker() -> Iterator[EmbeddedBroker]:
    """A fresh broker per test: topics, groups and offsets start empty (it starts in ~50 ms)."""
    with EmbeddedBroker() as b:
        yield b


@pytest.fixture(scope="session")
def demo_registry_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_demo_models(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="session")
def demo_registry(demo_registry_path: Path) -> ModelRegistry:
    return ModelRegistry.from_toml(demo_registry_path)


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A database of its own for this test session, dropped at the end.

    Unreachable PostgreSQL skips the PostgreSQL cases on a developer's machine; under
    CI (``CI`` set) it fails, so a green CI always means both databases were tested.
    """
    admin = make_engine(PG_URL).execution_options(isolation_level="AUTOCOMMIT")
    name = f"inferlane_test_{uuid.uuid4().hex[:12]}"
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except OperationalError as exc:
        admin.dispose()
        if os.environ.get("CI"):
            raise
        pytest.skip(f"PostgreSQL at {PG_URL} is not reachable: {exc.orig}")
    yield admin.url.set(database=name).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture
def pg_url(pg_database: str) -> Iterator[str]:
    """The session's PostgreSQL database, emptied again after the test."""
    yield pg_database
    engine = make_engine(pg_database)
    with engine.begin() as conn:
        conn.execute(text(f"DROP TABLE IF EXISTS {ALL_TABLES} CASCADE"))
    engine.dispose()


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Worker processes a test starts (it appends them): killed and reaped after it."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database; the PostgreSQL one is emptied again after the test."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    url: str = request.getfixturevalue("pg_url")
    yield url
