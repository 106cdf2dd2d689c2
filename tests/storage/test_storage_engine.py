"""make_engine: SQLite tuning and paths, PostgreSQL driver choice."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage import make_engine


def test_sqlite_runs_in_wal_with_normal_sync_and_a_busy_timeout(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'x.db'}")
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar_one() == "wal"
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar_one() == 1  # NORMAL
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar_one() > 0
    engine.dispose()


def test_a_relative_sqlite_path_gets_its_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    engine = make_engine("sqlite:///data/nested/store.db")
    with engine.connect() as conn:
        conn.exec_driver_sql("SELECT 1")
    engine.dispose()
    assert (tmp_path / "data" / "nested" / "store.db").is_file()


def test_an_in_memory_sqlite_works() -> None:
    engine = make_engine("sqlite://")
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT 1").scalar_one() == 1
    engine.dispose()


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
def test_postgres_urls_get_the_psycopg_driver(scheme: str) -> None:
    engine = make_engine(f"{scheme}://u@db.invalid:5432/x")
    assert engine.dialect.driver == "psycopg"
    engine.dispose()


def test_an_explicit_postgres_driver_is_kept() -> None:
    engine = make_engine("postgresql+psycopg://u@db.invalid:5432/x")
    assert engine.url.drivername == "postgresql+psycopg"
    engine.dispose()
