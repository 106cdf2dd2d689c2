"""Request latency per lane over time, from ``inference_results`` (for the report)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, select

from storage.drift_records import as_utc
from storage.errors import classified_errors
from storage.schema import inference_results


@dataclass(frozen=True, slots=True)
class LatencySample:
    at: datetime
    lane: str
    total_ms: float


def lane_latencies(
    engine: Engine, model: str, *, since: datetime | None = None, limit: int = 100_000
) -> list[LatencySample]:
    """The newest ``limit`` ok results of ``model`` (oldest first): the (model,
    created_at) index reads them without a scan."""
    r = inference_results
    query = (
        select(r.c.created_at, r.c.priority, r.c.total_ms)
        .where(r.c.model == model, r.c.status == "ok")
        .order_by(r.c.created_at.desc())
        .limit(limit)
    )
    if since is not None:
        query = query.where(r.c.created_at >= since)
    with classified_errors(), engine.connect() as conn:
        rows = conn.execute(query).all()
    return [LatencySample(as_utc(at), lane, ms) for at, lane, ms in reversed(rows)]
