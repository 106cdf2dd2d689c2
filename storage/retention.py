"""Retention: delete drift rows older than a cutoff, a small batch per transaction.

Each batch holds the write lock (SQLite) or its row locks (PostgreSQL) for only a few
milliseconds, so the worker's writes wait at most that long between batches. Only the
drift tables are purged: the results table is the service's record, not a statistic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import ColumnElement, Engine, Table, delete, select, tuple_

from storage.engine import begin_write
from storage.errors import classified_errors
from storage.schema import drift_bins, drift_flags, drift_windows, inference_log


@dataclass(slots=True)
class Purged:
    rows: dict[str, int] = field(default_factory=dict)  # table -> rows deleted

    @property
    def total(self) -> int:
        return sum(self.rows.values())


def purge(engine: Engine, older_than: datetime, *, batch_rows: int = 1000) -> Purged:
    """Delete rows dated before ``older_than``; return how many per table."""
    purged = Purged()
    with classified_errors(), engine.connect() as conn:
        models = list(conn.execute(select(inference_log.c.model).distinct()).scalars())
    for model in models:
        # Per model: the (model, created_at) index finds the oldest rows without a scan.
        _purge(engine, inference_log, inference_log.c.created_at, older_than, batch_rows,
               purged, inference_log.c.model == model)  # fmt: skip
    for table in (drift_bins, drift_flags, drift_windows):
        _purge(engine, table, table.c.window_start, older_than, batch_rows, purged)
    return purged


def _purge(
    engine: Engine,
    table: Table,
    dated: ColumnElement[datetime],
    older_than: datetime,
    batch_rows: int,
    purged: Purged,
    *where: ColumnElement[bool],
) -> None:
    key = list(table.primary_key.columns)
    while True:
        oldest = select(*key).where(dated < older_than, *where).limit(batch_rows)
        target = key[0] if len(key) == 1 else tuple_(*key)
        stmt = delete(table).where(target.in_(oldest))
        with classified_errors(), begin_write(engine) as conn:
            n = conn.execute(stmt).rowcount
        purged.rows[table.name] = purged.rows.get(table.name, 0) + max(n, 0)
        if n < batch_rows:
            return
