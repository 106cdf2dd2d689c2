"""Factories for the records the store takes, with defaults a test can override."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from storage import DriftRow, OffsetRow, ResultRow

NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


def result(request_id: str, **overrides: Any) -> ResultRow:
    values: dict[str, Any] = {
        "request_id": request_id,
        "model": "digits",
        "model_version": "1",
        "status": "ok",
        "priority": "normal",
        "outputs": {"label": 3, "scores": [0.1, 0.9]},
        "error_code": None,
        "error_message": None,
        "queue_ms": 1.5,
        "compute_ms": 2.5,
        "total_ms": 4.0,
        "batch_id": "b1",
        "batch_size": 8,
        "source_topic": "inferlane.requests",
        "source_partition": 0,
        "source_offset": 0,
        "created_at": NOW,
    }
    return ResultRow(**{**values, **overrides})


def drift(request_id: str, output: float, expected: float, model: str = "reg") -> DriftRow:
    return DriftRow(
        request_id=request_id,
        model=model,
        model_version="1",
        output=output,
        expected=expected,
        error=output - expected,
        created_at=NOW,
    )


def offset(topic: str, partition: int, next_offset: int, group_id: str = "g") -> OffsetRow:
    return OffsetRow(group_id=group_id, topic=topic, partition=partition, next_offset=next_offset)
