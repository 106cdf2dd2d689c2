"""What one finished batch tells the drift windows: rows, outputs, inputs, label errors."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from consumers.contract import Status
from storage.drift_records import CATEGORICAL, NUMERIC
from worker.models import Adapter, ClassifierAdapter, RegressorAdapter
from worker.pending import Batch, Outcome


@dataclass(frozen=True, slots=True)
class Observation:
    """The successful items of one batch of one model version."""

    model: str
    model_version: str
    rows: int
    output_kind: str | None  # CATEGORICAL, NUMERIC, or None: outputs not tracked
    classes: int  # bins of a categorical output
    outputs: np.ndarray  # class labels or numbers, one per row (empty if not tracked)
    inputs: np.ndarray  # mean of each numeric input's features (empty if not numeric)
    abs_errors: list[float]  # |output - expected| of the labelled rows


def observe(batch: Batch, outcomes: Sequence[Outcome], adapter: Adapter) -> Observation | None:
    """None when no item of the batch succeeded."""
    ok = [
        (pending, o)
        for pending, o in zip(batch.items, outcomes, strict=True)
        if o.result is not None and o.result.status == Status.OK
    ]
    if not ok:
        return None
    first = ok[0][1].result
    assert first is not None
    kind, classes, outputs = _outputs(adapter, [o.result.outputs for _, o in ok if o.result])
    numeric_inputs = isinstance(adapter, ClassifierAdapter | RegressorAdapter)
    inputs = np.stack([p.item for p, _ in ok]).mean(axis=1) if numeric_inputs else np.empty(0)
    return Observation(
        model=first.model,
        model_version=first.model_version or "",
        rows=len(ok),
        output_kind=kind,
        classes=classes,
        outputs=outputs,
        inputs=inputs,
        abs_errors=[abs(o.drift[0] - o.drift[1]) for _, o in ok if o.drift is not None],
    )


def _outputs(adapter: Adapter, outputs: list[object]) -> tuple[str | None, int, np.ndarray]:
    if isinstance(adapter, ClassifierAdapter):
        labels = [o.get("label", -1) if isinstance(o, dict) else -1 for o in outputs]
        return CATEGORICAL, adapter.num_classes, np.asarray(labels, dtype=np.int64)
    if isinstance(adapter, RegressorAdapter):
        return NUMERIC, 0, np.asarray(outputs, dtype=np.float64)
    return None, 0, np.empty(0)
