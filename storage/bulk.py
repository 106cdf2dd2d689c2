"""Bulk statements run straight on the driver's ``executemany``.

Compiled once per engine; each row is bound by its column types' own bind processors
(JSON, timestamps), applied only where a type has one. SQLAlchemy's per-row parameter
building was the largest single cost of a results write (about a quarter of the
worker's GIL time on digits), and a write happens for every request.

On PostgreSQL a write of many rows (a job's window) goes through COPY instead: into a
temporary table of the same shape, then one ``INSERT ... SELECT`` with the same
``ON CONFLICT`` update, in the caller's transaction. executemany, even pipelined, pays
a statement per row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Dialect, Table
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.dml import Insert

Processor = Callable[[Any], Any]


# From this many rows on, a PostgreSQL write goes through COPY (below it, the staging
# table's extra round trips cost more than they save).
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

    def execute(self, conn: Connection, rows: Iterable[Sequence[Any]]) -> None:
        """``rows`` hold values in ``columns`` order."""
        params = [self._bind(row) for row in rows]
        if self.copy is not None and len(params) >= COPY_MIN_ROWS:
            self.copy.execute(conn, params)
        elif params:
            conn.exec_driver_sql(self.sql, params)

    def _bind(self, row: Sequence[Any]) -> tuple[Any, ...]:
        values = list(row)
        for i, processor in self.processed:
            values[i] = processor(values[i])
        return tuple(values)


@dataclass(frozen=True, slots=True)
class CopyUpsert:
    """The upsert as COPY into a temporary table (emptied at commit) and one
    ``INSERT ... SELECT ... ON CONFLICT (key) DO UPDATE`` of every other column."""

    create: str
    copy: str
    insert: str

    @classmethod
    def compile(cls, table: Table, columns: Sequence[str], dialect: Dialect) -> CopyUpsert:
        quote = dialect.identifier_preparer.quote
        name, stage = quote(table.name), quote(f"inferlane_stage_{table.name}")
        names = ", ".join(quote(c) for c in columns)
        key = [c.name for c in table.primary_key]
        update = ", ".join(f"{quote(c)} = EXCLUDED.{quote(c)}" for c in columns if c not in key)
        return cls(
            f"CREATE TEMPORARY TABLE IF NOT EXISTS {stage} (LIKE {name} INCLUDING DEFAULTS) "
            "ON COMMIT DELETE ROWS",
            f"COPY {stage} ({names}) FROM STDIN",
            f"INSERT INTO {name} ({names}) SELECT {names} FROM {stage} "
            f"ON CONFLICT ({', '.join(quote(c) for c in key)}) DO UPDATE SET {update}",
        )

    def execute(self, conn: Connection, params: Sequence[tuple[Any, ...]]) -> None:
        """Rows already bound (``BulkStatement._bind``); in ``conn``'s transaction."""
        import psycopg  # here: a SQLite-only install may lack the driver

        conn.exec_driver_sql(self.create)
        cursor: Any = conn.connection.cursor()  # psycopg's, which has ``copy``
        try:
            with cursor.copy(self.copy) as copy:
                for row in params:
                    copy.write_row(row)
        except psycopg.Error as exc:  # as SQLAlchemy wraps the statements' errors
            raise DBAPIError.instance(self.copy, None, exc, psycopg.Error) from exc
        finally:
            cursor.close()
        conn.exec_driver_sql(self.insert)


def _positional(dialect: Dialect) -> Dialect:
    # psycopg takes %s placeholders with sequences; the engine's own style is named.
    if dialect.name == "postgresql":
        return PGDialect_psycopg(paramstyle="format")
    return dialect
