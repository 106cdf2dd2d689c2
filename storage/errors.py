"""Errors the store raises to its caller, and which driver errors become them."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import ClassVar

from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout


class StoreUnavailable(Exception):
    """The database cannot be reached or is busy: back off and retry the same batch.

    Nothing of the failed write is kept (it ran in one transaction), so a retry
    replays it whole.
    """

    code: ClassVar[str] = "store_unavailable"
    retriable: ClassVar[bool] = True


class RowsRefused(Exception):
    """The database refused a value in the batch (a constraint, or a value its column
    cannot hold): the same rows will fail again, so a retry cannot help. The caller
    isolates the refused rows; ``reason`` is the database's message, without the
    statement or its parameters."""

    code: ClassVar[str] = "store_refused"
    retriable: ClassVar[bool] = False

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


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
def classified_errors() -> Iterator[None]:
    """``StoreUnavailable`` for errors a retry can cure, ``RowsRefused`` for values the
    database refuses; the rest (a missing table, bad SQL: our bugs) pass through."""
    try:
        yield
    except PoolTimeout as exc:
        raise StoreUnavailable(str(exc)) from exc
    except DBAPIError as exc:
        if _is_transient(exc):
            raise StoreUnavailable(_first_line(exc.orig)) from exc
        if isinstance(exc, IntegrityError | DataError):
            raise RowsRefused(_first_line(exc.orig)) from exc
        raise
    except OverflowError as exc:  # sqlite3: an integer beyond 64 bits
        raise RowsRefused(str(exc)) from exc


def _first_line(error: BaseException | None) -> str:
    # The driver's own message: SQLAlchemy's adds the statement and its parameters.
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def _is_transient(exc: DBAPIError) -> bool:
    if exc.connection_invalidated:
        return True
    if isinstance(exc.orig, sqlite3.Error):
        return exc.orig.sqlite_errorcode & 0xFF in _SQLITE_TRANSIENT
    # On PostgreSQL (psycopg), OperationalError is the connection, lock, deadlock and
    # shutdown class; constraint and SQL errors have their own classes.
    return isinstance(exc, OperationalError)
