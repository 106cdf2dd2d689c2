"""Dialect-specific upsert statements: ``INSERT ... ON CONFLICT (primary key) DO UPDATE``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.dml import Insert
from sqlalchemy.sql.functions import Function

from storage.schema import consumer_offsets, generations, inference_log, inference_results


@dataclass(frozen=True, slots=True)
class Upserts:
    """The writer's statements, built once per engine."""

    results: Insert
    drift: Insert
    offsets: Insert
    generations: Insert


def build_upserts(dialect_name: str) -> Upserts:
    return Upserts(
        # A replay overwrites the row with its latest values: one row per request id.
        results=upsert(inference_results, dialect_name),
        drift=upsert(inference_log, dialect_name),
        # A late or replayed batch must not move the resume point backwards.
        offsets=upsert(consumer_offsets, dialect_name, keep_max="next_offset"),
        generations=upsert(generations, dialect_name),
    )


def upsert(table: Table, dialect_name: str, *, keep_max: str | None = None) -> Insert:
    """Insert, or overwrite every other column of the row with the same primary key
    (``keep_max``: keep the larger of the stored and the new value)."""
    stmt: sqlite.Insert | postgresql.Insert
    if dialect_name == "sqlite":
        stmt, greatest = sqlite.insert(table), "max"  # SQLite's two-argument max is scalar
    elif dialect_name == "postgresql":
        stmt, greatest = postgresql.insert(table), "greatest"
    else:
        raise ValueError(f"unsupported database dialect: {dialect_name}")
    key = [column.name for column in table.primary_key]
    set_: dict[str, Any] = {
        column.name: stmt.excluded[column.name]
        for column in table.columns
        if column.name not in key
    }
    if keep_max is not None:
        set_[keep_max] = Function(greatest, table.c[keep_max], stmt.excluded[keep_max])
    return stmt.on_conflict_do_update(index_elements=key, set_=set_)
