"""Typed objects the pipeline stages pass to each other."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pydantic import JsonValue

from consumers.contract import ErrorInfo, InferenceRequest, InferenceResult, Priority
from consumers.records import DeadLetter, RawRecord
from worker.base.generation import GenerationStats

_batch_ids = itertools.count(1)


@dataclass(slots=True, eq=False)
class Pending:
    """A validated request waiting in a lane, with its adapter-prepared input."""

    request: InferenceRequest
    item: Any = field(repr=False)
    cost: int
    lane: Priority
    record: RawRecord
    deadline_s: float | None  # monotonic; None: no deadline
    # The registry key of the version that answers: a rollout's candidate
    # (``name@version``), or None for the model's primary version.
    serving: str | None = None

    @property
    def model(self) -> str:
        """What the batcher groups by and the store loads: one version of one model."""
        return self.serving or self.request.model

    @property
    def received_s(self) -> float:
        return self.record.received_s


@dataclass(slots=True)
class Batch:
    """One model version, one forward pass."""

    model: str  # the registry key (a candidate's is ``name@version``)
    items: list[Pending]
    formed_s: float
    id: str = field(default_factory=lambda: f"b{next(_batch_ids)}")
    # The lane it was formed from (the batcher sets it; one FIFO lane says normal);
    # None: its highest item's (see ``worker.scheduling.lanes.lane_of``).
    lane: Priority | None = None
    # A job window's rows instead of requests (``items`` empty): a numeric matrix, or a
    # list of prepared items. Its run carries the model's raw output, not item results.
    rows: Any = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.items) if self.rows is None else len(self.rows)


@dataclass(slots=True)
class ItemResult:
    """What the executor says of one item: outputs, the error that item alone caused,
    or that its deadline passed before its batch started (it was not computed)."""

    outputs: JsonValue = None
    error: ErrorInfo | None = None
    expired: bool = False


@dataclass(slots=True)
class BatchRun:
    """What the executor says of one batch: one result per item, and when and how long
    it computed."""

    results: list[ItemResult]
    model_version: str | None
    started_s: float  # monotonic
    compute_s: float
    output: Any = None  # a rows batch's raw model output; None if it was abandoned


class Labelled(NamedTuple):
    """One row of the drift log: what the model said, the label, and how wrong it was.

    Regressor: the number, the expected number, ``output - expected``. Classifier: the
    predicted class, the true class, and 1.0 if they differ else 0.0 (so a mean error is
    the error rate). Text embedding: the cosine distance to the expected vector, 0.0,
    the cosine distance.
    """

    output: float
    expected: float
    error: float


@dataclass(slots=True)
class Outcome:
    """How one consumed record ended: a result, a dead letter, or both (rejected)."""

    record: RawRecord
    result: InferenceResult | None = None
    dead_letter: DeadLetter | None = None
    drift: Labelled | None = None  # (output, expected, error) for the drift log
    batch_id: str | None = None
    reply_to: str | None = None  # results topic named by the request
    generation: GenerationStats | None = None  # a generative request's row
