"""Read helpers over the result and drift tables."""

from __future__ import annotations

from sqlalchemy import Engine, case, func, select, text

from storage.schema import inference_log, inference_results

# The anomaly query from the SQL contract, as users type it.
ANOMALY_SQL = "SELECT COUNT(*) FROM inference_log WHERE ABS(output - expected) > :threshold"

# Floats that went through a model rarely compare equal bit for bit.
EXACT_TOLERANCE = 1e-9


def anomaly_count(engine: Engine, threshold: float = 0.5, model: str | None = None) -> int:
    """Drift-log rows whose output is off by more than ``threshold``."""
    sql = ANOMALY_SQL
    params: dict[str, object] = {"threshold": threshold}
    if model is not None:
        sql += " AND model = :model"
        params["model"] = model
    with engine.connect() as conn:
        return int(conn.execute(text(sql), params).scalar_one())


def accuracy_by_model(engine: Engine) -> dict[str, tuple[int, int]]:
    """``{model: (checked rows, rows whose output matched expected)}``."""
    exact = func.abs(inference_log.c.output - inference_log.c.expected) < EXACT_TOLERANCE
    query = select(
        inference_log.c.model,
        func.count(),
        func.sum(case((exact, 1), else_=0)),
    ).group_by(inference_log.c.model)
    with engine.connect() as conn:
        return {model: (int(rows), int(hits)) for model, rows, hits in conn.execute(query)}


def result_counts(engine: Engine) -> dict[str, int]:
    """``{status: rows}`` over ``inference_results``."""
    query = select(inference_results.c.status, func.count()).group_by(inference_results.c.status)
    with engine.connect() as conn:
        return {status: int(rows) for status, rows in conn.execute(query)}


def count_results(engine: Engine) -> int:
    query = select(func.count()).select_from(inference_results)
    with engine.connect() as conn:
        return int(conn.execute(query).scalar_one())
