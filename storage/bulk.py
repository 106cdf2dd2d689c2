"""Bulk statements run straight on the driver's ``executemany``.

Compiled once per engine; each row is bound by its column types' own bind processors
(JSON, timestamps), applied only where a type has one. SQLAlchemy's per-row parameter
building was the largest single cost of a results write (about a quarter of the
worker's GIL time on digits), and a write happens for every request.

On PostgreSQL a write of many rows (a job's window) goes through COPY instead, its text
built a column at a time (``storage.copy_text``): executemany, even pipelined, pays a
statement per row. New keys (a fresh job's windows) are copied straight into the table,
inside a savepoint; if any key is there already (a resumed window, a Ray batch run
again), the savepoint is rolled back and the same text goes into a temporary table of
the same shape, then one ``INSERT ... SELECT`` with the same ``ON CONFLICT`` update. All
of it runs in the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Dialect, Table
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.sql.dml import Insert

from storage.copy_text import CopyText
from storage.records import RowColumns

Processor = Callable[[Any], Any]


# From this many rows on, a PostgreSQL write goes through COPY (below it, the savepoint's
# and the COPY's own round trips cost more than they save).
COPY_MIN_ROWS = 500


@dataclass(frozen=True, slots=True)
class BulkStatement:
    sql: str
    columns: tuple[str, ...]  # parameter order
    processed: tuple[tuple[int, Processor], ...]  # (position, bind processor)
    copy: CopyUpsert | None = None  # PostgreSQL only

    @classmethod
    def compile(cls, stmt: Insert, dialect: Dialect) -> BulkStatement:
        """``stmt``: an upsert that overwrites every column but the key (``storage.upserts``)."""
        compiled = stmt.compile(dialect=_positional(dialect))
        columns = tuple(compiled.positiontup or ())
        processed = []
        for i, name in enumerate(columns):
            processor = compiled.binds[name].type.dialect_impl(dialect).bind_processor(dialect)
            if processor is not None:
                processed.append((i, processor))
        copy = None
        if dialect.name == "postgresql" and isinstance(stmt.table, Table):
            copy = CopyUpsert.compile(stmt.table, columns, dialect)
        return cls(compiled.string, columns, tuple(processed), copy)

    def execute(self, conn: Connection, rows: Sequence[Sequence[Any]]) -> None:
        """``rows`` hold values in ``columns`` order."""
        if self.copy is not None and len(rows) >= COPY_MIN_ROWS:
            self.copy.execute(conn, self.copy.text.payload(rows))
        elif rows:
            conn.exec_driver_sql(self.sql, [self._bind(row) for row in rows])

    def execute_columns(self, conn: Connection, rows: RowColumns) -> None:
        """``rows`` by column name (every one of ``columns``)."""
        if self.copy is not None and rows.length >= COPY_MIN_ROWS:
            self.copy.execute(conn, self.copy.text.payload_columns(rows))
        elif rows.length:
            self.execute(conn, rows.rows(self.columns))

    def _bind(self, row: Sequence[Any]) -> tuple[Any, ...]:
        values = list(row)
        for i, processor in self.processed:
            values[i] = processor(values[i])
        return tuple(values)


@dataclass(frozen=True, slots=True)
class CopyUpsert:
    """The upsert as COPY: straight into the table while every key is new, else into a
    temporary table (emptied at commit) and one ``INSERT ... SELECT ... ON CONFLICT (key)
    DO UPDATE`` of every other column."""

    text: CopyText
    copy: str
    create: str
    copy_staged: str
    insert: str

    @classmethod
    def compile(cls, table: Table, columns: Sequence[str], dialect: Dialect) -> CopyUpsert:
        quote = dialect.identifier_preparer.quote
        name, stage = quote(table.name), quote(f"inferlane_stage_{table.name}")
        names = ", ".join(quote(c) for c in columns)
        key = [c.name for c in table.primary_key]
        update = ", ".join(f"{quote(c)} = EXCLUDED.{quote(c)}" for c in columns if c not in key)
        return cls(
            CopyText.compile(table, columns),
            f"COPY {name} ({names}) FROM STDIN",
            f"CREATE TEMPORARY TABLE IF NOT EXISTS {stage} (LIKE {name} INCLUDING DEFAULTS) "
            "ON COMMIT DELETE ROWS",
            f"COPY {stage} ({names}) FROM STDIN",
            f"INSERT INTO {name} ({names}) SELECT {names} FROM {stage} "
            f"ON CONFLICT ({', '.join(quote(c) for c in key)}) DO UPDATE SET {update}",
        )

    def execute(self, conn: Connection, payload: Iterable[memoryview]) -> None:
        """Rows as COPY text (``text``'s payload of unbound rows), in ``conn``'s
        transaction."""
        import psycopg  # here: a SQLite-only install may lack the driver

        text = list(payload)
        try:
            with conn.begin_nested():
                _copy(conn, self.copy, text)
            return
        except IntegrityError as exc:
            if not isinstance(exc.orig, psycopg.errors.UniqueViolation):
                raise
        # A key is stored already: the savepoint undid this COPY; upsert every row.
        conn.exec_driver_sql(self.create)
        _copy(conn, self.copy_staged, text)
        conn.exec_driver_sql(self.insert)


def _copy(conn: Connection, statement: str, text: Iterable[memoryview]) -> None:
    import psycopg

    cursor: Any = conn.connection.cursor()  # psycopg's, which has ``copy``
    try:
        with cursor.copy(statement) as copy:
            for piece in text:
                copy.write(piece)
    except psycopg.Error as exc:  # as SQLAlchemy wraps the statements' errors
        raise DBAPIError.instance(statement, None, exc, psycopg.Error) from exc
    finally:
        cursor.close()


def _positional(dialect: Dialect) -> Dialect:
    # psycopg takes %s placeholders with sequences; the engine's own style is named.
    if dialect.name == "postgresql":
        return PGDialect_psycopg(paramstyle="format")
    return dialect
