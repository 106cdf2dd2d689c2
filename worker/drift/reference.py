"""Reference-model sampling: a share of requests also runs on a reference model, and
the served output's distance from the reference output is logged.

Sampling is by request id (a hash), so a replayed request is checked the same way.
This catches the optimized model that silently returns wrong values.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from pydantic import JsonValue

from consumers.contract import Status
from worker.base.pending import Batch, Outcome, Pending
from worker.settings.drift_thresholds import DriftThresholds

# (reference model name, served requests) -> its outputs, one per request.
RunReference = Callable[[str, list[Pending]], list[JsonValue]]


@dataclass(frozen=True, slots=True)
class ReferenceCheck:
    request_id: str
    model: str
    model_version: str
    reference_model: str
    deviation: float
    tolerance: float
    at: datetime

    @property
    def deviant(self) -> bool:
        return not self.deviation <= self.tolerance  # NaN counts as deviant


def sampled(request_id: str, share: float) -> bool:
    return zlib.crc32(request_id.encode()) < share * 2**32


def deviation(served: JsonValue, reference: JsonValue) -> float:
    """The largest absolute difference between two outputs of the same shape: numbers,
    lists of numbers (embeddings), or classifier outputs (a different label counts 1)."""
    if isinstance(served, dict) and isinstance(reference, dict):
        probs = _largest_gap(served.get("probs"), reference.get("probs"))
        gap = max(probs, 0.0 if served.get("label") == reference.get("label") else 1.0)
    else:
        gap = _largest_gap(served, reference)
    return math.inf if math.isnan(gap) else gap  # SQLite would store NaN as NULL


def _largest_gap(a: JsonValue, b: JsonValue) -> float:
    if isinstance(a, int | float) and isinstance(b, int | float):
        return abs(float(a) - float(b))
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return max((_largest_gap(x, y) for x, y in zip(a, b, strict=True)), default=0.0)
    return math.inf  # shapes differ: as far apart as can be


def check_batch(
    batch: Batch,
    outcomes: Sequence[Outcome],
    t: DriftThresholds,
    run: RunReference,
    at: datetime,
) -> list[ReferenceCheck]:
    """Run the sampled, successful items of ``batch`` on ``t.reference_model``."""
    if t.reference_model is None:
        return []
    chosen = [
        (pending, o.result)
        for pending, o in zip(batch.items, outcomes, strict=True)
        if o.result is not None
        and o.result.status == Status.OK
        and sampled(o.result.request_id, t.reference_share)
    ]
    if not chosen:
        return []
    outputs = run(t.reference_model, [pending for pending, _ in chosen])
    return [
        ReferenceCheck(
            r.request_id,
            r.model,
            r.model_version or "",
            t.reference_model,
            deviation(r.outputs, ref),
            t.reference_tolerance,
            at,
        )
        for (_, r), ref in zip(chosen, outputs, strict=True)
    ]
