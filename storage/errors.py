"""Errors the store raises to its caller, and which driver errors become them."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import ClassVar

from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout


class StoreUnavailable(Exception):
    """The database cannot be reached or is busy: back off and retry the same batch.

    Nothing of the failed write is kept (it ran in one transaction), so a retry
    replays it whole.
    """

    code: ClassVar[str] = "store_unavailable"
    retriable: ClassVar[bool] = True


# sqlite3 raises OperationalError for missing tables and bad SQL too; only these
# primary result codes go away by waiting.
_SQLITE_TRANSIENT = frozenset(
    {
        sqlite3.SQLITE_BUSY,
        sqlite3.SQLITE_LOCKED,
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_CANTOPEN,
        sqlite3.SQLITE_FULL,
    }
)


@contextmanager
def unavailable_on_transient_errors() -> Iterator[None]:
    """Raise ``StoreUnavailable`` for errors a retry can cure; let the rest through."""
    try:
        yield
    except PoolTimeout as exc:
        raise StoreUnavailable(str(exc)) from exc
    except DBAPIError as exc:
        if _is_transient(exc):
            raise StoreUnavailable(str(exc)) from exc
        raise


def _is_transient(exc: DBAPIError) -> bool:
    if exc.connection_invalidated:
        return True
    if isinstance(exc.orig, sqlite3.Error):
        return exc.orig.sqlite_errorcode & 0xFF in _SQLITE_TRANSIENT
    # On PostgreSQL (psycopg), OperationalError is the connection, lock, deadlock and
    # shutdown class; constraint and SQL errors have their own classes.
    return isinstance(exc, OperationalError)
