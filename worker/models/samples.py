"""Recent real inputs per model: what a guarded optimization is checked on, besides the
adapter's example (an optimization can agree on a zero example and not on real data)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

from pydantic import JsonValue

from worker.base.pending import Batch, BatchRun, Outcome

KEEP = 8


class InputSamples:
    """The last ``KEEP`` inputs of requests each model served. Appends are atomic, so
    the event loop records while the loader thread reads."""

    def __init__(self) -> None:
        self._by_model: dict[str, deque[JsonValue]] = {}

    def record(self, model: str, inputs: JsonValue) -> None:
        queue = self._by_model.get(model)
        if queue is None:
            queue = self._by_model[model] = deque(maxlen=KEEP)
        queue.append(inputs)

    def of(self, model: str) -> list[JsonValue]:
        return list(self._by_model.get(model, ()))


class ServedInputs:
    """A batch observer: one served input of each batch goes to ``record`` (the
    registry's samples), so a later load checks an optimization on it too."""

    def __init__(self, record: Callable[[str, JsonValue], None]) -> None:
        self._record = record

    def batch_done(self, batch: Batch, run: BatchRun, outcomes: Sequence[Outcome]) -> None:
        served = next((i for i, o in enumerate(outcomes) if o.result and not o.result.error), None)
        if served is not None:
            self._record(batch.model, batch.items[served].request.inputs)
