"""What one finished batch tells the drift windows: rows, outputs, inputs, label errors."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from consumers.contract import Status
from storage.drift_records import CATEGORICAL, NUMERIC
from worker.base.pending import Batch, Outcome
from worker.models import Adapter, ClassifierAdapter, RegressorAdapter


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
    abs_errors: list[float]  # |error| of the labelled rows (a classifier's: 0 or 1)


def observe(batch: Batch, outcomes: Sequence[Outcome], adapter: Adapter) -> Observation | None:
    """None when no item of the batch succeeded."""
    # One pass over the items, then whole-batch numpy: this runs for every request served.
    items: list[np.ndarray] = []
    outputs: list[object] = []
    abs_errors: list[float] = []
    first = None
    for pending, o in zip(batch.items, outcomes, strict=True):
        result = o.result
        if result is None or result.status != Status.OK:
            continue
        if first is None:
            first = result
        items.append(pending.item)
        outputs.append(result.outputs)
        if o.drift is not None:
            abs_errors.append(abs(o.drift.error))
    if first is None:
        return None
    kind, classes, output_values = _outputs(adapter, outputs)
    numeric_inputs = isinstance(adapter, ClassifierAdapter | RegressorAdapter)
    return Observation(
        model=first.model,
        model_version=first.model_version or "",
        rows=len(items),
        output_kind=kind,
        classes=classes,
        outputs=output_values,
        inputs=_row_means(items) if numeric_inputs else np.empty(0),
        abs_errors=abs_errors,
    )


def _row_means(items: list[np.ndarray]) -> np.ndarray:
    """The mean of each item's features (items: flat arrays of one length)."""
    # As np.stack, and as strict about shapes, but without its Python step per item; a
    # bare reduce, as ndarray.mean's Python wrapper costs more than the sum on a batch.
    rows = np.array(items)
    return np.add.reduce(rows, axis=1, dtype=np.float64) / rows.shape[1]


def _outputs(adapter: Adapter, outputs: list[object]) -> tuple[str | None, int, np.ndarray]:
    if isinstance(adapter, ClassifierAdapter):
        labels = [o.get("label", -1) if isinstance(o, dict) else -1 for o in outputs]
        return CATEGORICAL, adapter.num_classes, np.asarray(labels, dtype=np.int64)
    if isinstance(adapter, RegressorAdapter):
        return NUMERIC, 0, np.asarray(outputs, dtype=np.float64)
    return None, 0, np.empty(0)
