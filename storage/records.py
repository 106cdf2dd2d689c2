"""Plain records the writer takes: built by the worker, free of Kafka and model types."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class ResultRow:
    """One request's final result: a row of ``inference_results``."""

    request_id: str
    model: str
    model_version: str | None
    status: str  # "ok", "error", "expired" or "rejected"
    priority: str
    outputs: Any  # JSON-able; None is stored as SQL NULL
    error_code: str | None
    error_message: str | None
    queue_ms: float
    compute_ms: float
    total_ms: float
    batch_id: str | None
    batch_size: int
    source_topic: str
    source_partition: int
    source_offset: int
    created_at: datetime  # UTC, timezone-aware


@dataclass(frozen=True, slots=True)
class DriftRow:
    """One accuracy check: a row of ``inference_log``; ``error`` is ``output - expected``."""

    request_id: str
    model: str
    model_version: str | None
    output: float
    expected: float
    error: float
    created_at: datetime  # UTC, timezone-aware


@dataclass(frozen=True, slots=True)
class GenerationRow:
    """A generative request's final text and timings: a row of ``generations``.
    ``exact_match`` and ``f1`` are set when the request carried expected text."""

    request_id: str
    model: str
    model_version: str | None
    text: str
    finish_reason: str
    prompt_tokens: int
    generated_tokens: int
    ttft_ms: float | None  # from receipt by the worker to the first token
    tpot_ms: float | None  # mean time per output token after the first
    exact_match: bool | None
    f1: float | None
    created_at: datetime  # UTC, timezone-aware


@dataclass(frozen=True, slots=True)
class OffsetRow:
    """The next offset to consume in a partition (Kafka commit semantics)."""

    group_id: str
    topic: str
    partition: int
    next_offset: int
