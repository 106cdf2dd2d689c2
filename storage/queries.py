"""Read helpers over the result and drift tables."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, case, func, select, text

from storage.schema import inference_log, inference_results

# The anomaly query from the SQL contract, as users type it.
ANOMALY_SQL = "SELECT COUNT(*) FROM inference_log WHERE ABS(output - expected) > :threshold"


def anomaly_count(engine: Engine, threshold: float = 0.5, model: str | None = None) -> int:
    """Drift-log rows whose output is off by more than ``threshold``."""
    sql = ANOMALY_SQL
    params: dict[str, object] = {"threshold": threshold}
    if model is not None:
        sql += " AND model = :model"
        params["model"] = model
    with engine.connect() as conn:
        return int(conn.execute(text(sql), params).scalar_one())


@dataclass(frozen=True, slots=True)
class DriftSummary:
    """One model's drift log: rows checked, rows off by more than the threshold (for a
    classifier: the misclassified), and the mean of ``|error|`` (for a classifier: its
    error rate)."""

    rows: int
    anomalies: int
    mean_abs_error: float


def drift_summary(engine: Engine, threshold: float = 0.5) -> dict[str, DriftSummary]:
    off = func.abs(inference_log.c.output - inference_log.c.expected)
    query = select(
        inference_log.c.model,
        func.count(),
        func.sum(case((off > threshold, 1), else_=0)),
        func.avg(func.abs(inference_log.c.error)),
    ).group_by(inference_log.c.model)
    with engine.connect() as conn:
        return {
            model: DriftSummary(int(rows), int(off), float(mae))
            for model, rows, off, mae in conn.execute(query)
        }


def error_rms(engine: Engine, *, before: datetime) -> dict[str, float]:
    """Per model, the root mean square of the drift log's ``error`` in rows written
    before ``before``: a regressor's residual spread, in its own units."""
    query = (
        select(inference_log.c.model, func.avg(inference_log.c.error * inference_log.c.error))
        .where(inference_log.c.created_at < before)
        .group_by(inference_log.c.model)
    )
    with engine.connect() as conn:
        return {model: math.sqrt(float(ms)) for model, ms in conn.execute(query)}


def result_counts(engine: Engine) -> dict[str, int]:
    """``{status: rows}`` over ``inference_results``."""
    query = select(inference_results.c.status, func.count()).group_by(inference_results.c.status)
    with engine.connect() as conn:
        return {status: int(rows) for status, rows in conn.execute(query)}


def count_results(engine: Engine) -> int:
    query = select(func.count()).select_from(inference_results)
    with engine.connect() as conn:
        return int(conn.execute(query).scalar_one())
