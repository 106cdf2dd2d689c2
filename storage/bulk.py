"""Bulk statements run straight on the driver's ``executemany``.

Compiled once per engine; each row is bound by its column types' own bind processors
(JSON, timestamps), applied only where a type has one. SQLAlchemy's per-row parameter
building was the largest single cost of a results write (about a quarter of the
worker's GIL time on digits), and a write happens for every request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Dialect
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.sql.dml import Insert

Processor = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class BulkStatement:
    sql: str
    columns: tuple[str, ...]  # parameter order
    processed: tuple[tuple[int, Processor], ...]  # (position, bind processor)

    @classmethod
    def compile(cls, stmt: Insert, dialect: Dialect) -> BulkStatement:
        compiled = stmt.compile(dialect=_positional(dialect))
        columns = tuple(compiled.positiontup or ())
        processed = []
        for i, name in enumerate(columns):
            processor = compiled.binds[name].type.dialect_impl(dialect).bind_processor(dialect)
            if processor is not None:
                processed.append((i, processor))
        return cls(compiled.string, columns, tuple(processed))

    def execute(self, conn: Connection, rows: Iterable[Sequence[Any]]) -> None:
        """``rows`` hold values in ``columns`` order."""
        params = [self._bind(row) for row in rows]
        if params:
            conn.exec_driver_sql(self.sql, params)

    def _bind(self, row: Sequence[Any]) -> tuple[Any, ...]:
        values = list(row)
        for i, processor in self.processed:
            values[i] = processor(values[i])
        return tuple(values)


def _positional(dialect: Dialect) -> Dialect:
    # psycopg takes %s placeholders with sequences; the engine's own style is named.
    if dialect.name == "postgresql":
        return PGDialect_psycopg(paramstyle="format")
    return dialect
