"""The anomaly query, with a window in time and the worst rows.

``ABS(output - expected) > threshold`` over ``inference_log``; with a threshold of 0.5
or more, PostgreSQL and SQLite answer it from the partial index
``ix_inference_log_anomalies`` (plans in docs/DRIFT.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, Engine, func, select

from storage.drift_records import as_utc
from storage.errors import classified_errors
from storage.schema import inference_log


@dataclass(frozen=True, slots=True)
class AnomalyRow:
    request_id: str
    model: str
    model_version: str | None
    output: float
    expected: float
    abs_error: float
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Anomalies:
    count: int
    worst: list[AnomalyRow]  # largest |output - expected| first


def find_anomalies(
    engine: Engine,
    *,
    threshold: float = 0.5,
    model: str | None = None,
    since: datetime | None = None,
    limit: int = 20,
) -> Anomalies:
    t = inference_log
    abs_error = func.abs(t.c.output - t.c.expected)
    where: list[ColumnElement[bool]] = [abs_error > threshold]
    if model is not None:
        where.append(t.c.model == model)
    if since is not None:
        where.append(t.c.created_at >= since)
    count = select(func.count()).select_from(t).where(*where)
    worst = (
        select(
            t.c.request_id,
            t.c.model,
            t.c.model_version,
            t.c.output,
            t.c.expected,
            abs_error,
            t.c.created_at,
        )
        .where(*where)
        .order_by(abs_error.desc(), t.c.request_id)
        .limit(limit)
    )
    with classified_errors(), engine.connect() as conn:
        n = int(conn.execute(count).scalar_one())
        rows = [
            AnomalyRow(rid, m, v, out, exp, err, as_utc(at))
            for rid, m, v, out, exp, err, at in conn.execute(worst)
        ]
    return Anomalies(n, rows)
