"""Engines tuned per backend: SQLite as an embedded store, PostgreSQL in production."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import URL, Connection, Engine, create_engine, event, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import ConnectionPoolEntry

# Long enough to ride out another process's write or migration, short enough to surface
# a stuck lock as StoreUnavailable.
SQLITE_BUSY_TIMEOUT_MS = 30_000

# Execution option holding the statement that opens a SQLite transaction.
_SQLITE_BEGIN = "inferlane_sqlite_begin"


def make_engine(url: str) -> Engine:
    """Build an engine for ``url``; ``postgresql://`` URLs get the psycopg 3 driver."""
    parsed = _with_shipped_driver(make_url(url))
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(parsed)
    # hide_parameters: errors and logs show statements, never the values (request data).
    return create_engine(
        parsed, pool_pre_ping=True, json_serializer=json_text, hide_parameters=True
    )


def in_memory_sqlite(url: str) -> bool:
    """Whether ``url`` names an in-memory SQLite database: one per connection's process,
    so nothing another process writes to it is seen here."""
    parsed = make_url(url)
    return parsed.get_backend_name() == "sqlite" and (
        parsed.database in (None, "", ":memory:") or parsed.query.get("mode") == "memory"
    )


def redacted_url(url: str) -> str:
    """``url`` with its password shown as ``***``: the form to print or log."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:  # not a URL at all: print nothing of it
        return "<unparsable database URL>"


@contextmanager
def begin_write(engine: Engine) -> Iterator[Connection]:
    """A transaction for writing.

    On SQLite it takes the write lock when it begins (``BEGIN IMMEDIATE``), waiting up
    to the busy timeout; a deferred transaction that reads first may instead fail at
    once when another writer got in between.
    """
    with engine.connect() as conn:
        conn.execution_options(**{_SQLITE_BEGIN: "BEGIN IMMEDIATE"})
        with conn.begin():
            yield conn


def _with_shipped_driver(url: URL) -> URL:
    if url.drivername in ("postgresql", "postgres"):
        return url.set(drivername="postgresql+psycopg")
    return url


def json_text(value: Any) -> str:
    # orjson is fast, takes numpy arrays, and writes NaN as null: PostgreSQL's json type
    # rejects the NaN token that json.dumps writes.
    return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY).decode()


def _sqlite_engine(url: URL) -> Engine:
    database = url.database
    if database and database != ":memory:" and not url.query.get("uri"):
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, json_serializer=json_text, hide_parameters=True)
    event.listen(engine, "connect", _sqlite_on_connect)
    event.listen(engine, "begin", _sqlite_on_begin)
    return engine


def _sqlite_on_connect(dbapi_conn: sqlite3.Connection, _record: ConnectionPoolEntry) -> None:
    # pysqlite opens transactions lazily and not before DDL; take that over so that a
    # transaction (a write batch, a migration) covers every statement in it.
    dbapi_conn.isolation_level = None
    dbapi_conn.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    _enable_wal(dbapi_conn)
    # NORMAL is durable across process crashes in WAL mode; power loss may lose the last
    # commits, results and offsets together, so resuming from the stored offsets replays them.
    dbapi_conn.execute("PRAGMA synchronous=NORMAL")


def _enable_wal(dbapi_conn: sqlite3.Connection) -> None:
    """WAL lets readers (anomaly queries) run beside the writer.

    Switching a new file to WAL takes it whole, and SQLite answers "locked" at once,
    without the busy timeout, when other connections open it at the same moment; so
    retry until it is WAL (persistent in the file) or the busy timeout has passed.
    """
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            dbapi_conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY or time.monotonic() > deadline:
                raise
            time.sleep(0.005)


def _sqlite_on_begin(conn: Connection) -> None:
    conn.exec_driver_sql(conn.get_execution_options().get(_SQLITE_BEGIN, "BEGIN"))
