"""Rows of ``reference_checks``: one per request also run on a reference model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Engine, select

from storage.drift_records import as_utc
from storage.drift_windows import dialect_insert
from storage.engine import begin_write
from storage.errors import classified_errors
from storage.schema import reference_checks


def add_checks(engine: Engine, rows: Sequence[dict[str, Any]]) -> None:
    """Insert checks (column names as keys); a request checked again keeps its first."""
    if not rows:
        return
    stmt = dialect_insert(reference_checks, engine.dialect.name).on_conflict_do_nothing()
    with classified_errors(), begin_write(engine) as conn:
        conn.execute(stmt, list(rows))


def deviant_checks(engine: Engine, model: str | None = None) -> list[dict[str, Any]]:
    """Checks whose deviation passed their tolerance, worst first."""
    t = reference_checks
    query = select(t).where(t.c.deviation > t.c.tolerance).order_by(t.c.deviation.desc())
    if model is not None:
        query = query.where(t.c.model == model)
    with classified_errors(), engine.connect() as conn:
        rows = [dict(row._mapping) for row in conn.execute(query)]
    for row in rows:
        row["created_at"] = as_utc(row["created_at"])
    return rows
