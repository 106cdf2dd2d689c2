"""Plain records the writer takes: built by the worker, free of Kafka and model types."""

from __future__ import annotations

from collections.abc import Sequence
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


@dataclass(frozen=True, slots=True)
class Same:
    """A column holding one value in every row."""

    value: Any


@dataclass(frozen=True, slots=True)
class RowColumns:
    """Rows of one table as columns, by column name: a sequence of ``length`` values each,
    or ``Same``. A job's window is written this way: its values are columns already, and
    one row object per value cost more CPU than storing the row."""

    length: int
    columns: dict[str, Sequence[Any] | Same]

    @classmethod
    def of_rows(cls, rows: Sequence[Any], names: Sequence[str]) -> RowColumns:
        """``rows``: records with an attribute per name (``ResultRow``, ``DriftRow``)."""
        return cls(len(rows), {n: [getattr(r, n) for r in rows] for n in names})

    def column(self, name: str) -> Sequence[Any]:
        value = self.columns[name]
        return [value.value] * self.length if isinstance(value, Same) else value

    def rows(self, names: Sequence[str]) -> list[tuple[Any, ...]]:
        """The rows, each a tuple of ``names``' values."""
        return list(zip(*(self.column(n) for n in names), strict=True)) if self.length else []

    def __add__(self, other: RowColumns) -> RowColumns:
        if not other.length:
            return self
        if not self.length:
            return other
        joined: dict[str, Sequence[Any] | Same] = {}
        for name, mine in self.columns.items():
            theirs = other.columns[name]
            if isinstance(mine, Same) and mine == theirs:
                joined[name] = mine
            else:
                joined[name] = [*self.column(name), *other.column(name)]
        return RowColumns(self.length + other.length, joined)

    def last_per_key(self, key: str) -> RowColumns:
        """One row per value of ``key``, the last (as the row-at-a-time write keeps)."""
        if self.length < 2:
            return self
        last = {k: i for i, k in enumerate(self.column(key))}
        if len(last) == self.length:
            return self
        keep = sorted(last.values())
        return RowColumns(
            len(keep),
            {
                n: v if isinstance(v, Same) else [v[i] for i in keep]
                for n, v in self.columns.items()
            },
        )
