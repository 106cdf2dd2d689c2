"""Executors run batches off the event loop and hand back futures.

Contract: ``submit(batch)`` returns a ``concurrent.futures.Future`` that resolves to a
``BatchRun`` with exactly one ``ItemResult`` per item, in batch order. It does not
raise for a request's own failure: a batch that raises is bisected until the items
that fail alone are found (poison inputs; on a GPU this also splits batches that do
not fit in memory), and those items carry the error. Backends differ in where the
forward pass runs: ``ThreadExecutor`` on a dedicated CPU thread; a CUDA-stream
backend plugs in behind the same interface.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from consumers.contract import ErrorInfo
from consumers.errors import InferlaneError, ModelFailed
from worker.models import LoadedModel
from worker.pending import Batch, ItemResult, Pending


@dataclass(slots=True)
class BatchRun:
    results: list[ItemResult]
    model_version: str | None
    started_s: float  # monotonic
    compute_s: float


class Executor(ABC):
    @abstractmethod
    def submit(self, batch: Batch) -> Future[BatchRun]: ...

    @abstractmethod
    def shutdown(self) -> None:
        """Finish the batches already submitted, then release the backend."""


class ThreadExecutor(Executor):
    """One compute thread: torch parallelizes inside the forward pass, and a single
    submitter keeps batches in order without contention on the model."""

    def __init__(self, resolve: Callable[[str], LoadedModel]) -> None:
        self._resolve = resolve  # loads on first use, in the compute thread
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="inferlane-compute")

    def submit(self, batch: Batch) -> Future[BatchRun]:
        return self._pool.submit(run_batch, self._resolve, batch)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)


def run_batch(resolve: Callable[[str], LoadedModel], batch: Batch) -> BatchRun:
    started = time.monotonic()
    try:
        model = resolve(batch.model)
    except Exception as exc:  # a model that cannot load fails its requests, not the worker
        error = _error(f"model {batch.model!r} could not be loaded", exc)
        return BatchRun([ItemResult(error=error) for _ in batch.items], None, started, 0.0)
    results = _run_isolating(model, batch.items)
    return BatchRun(results, model.version, started, time.monotonic() - started)


def _run_isolating(model: LoadedModel, items: Sequence[Pending]) -> list[ItemResult]:
    try:
        outputs = model.run([p.item for p in items])
    except Exception as exc:
        if len(items) == 1:
            return [ItemResult(error=_error("model raised on this input", exc))]
        mid = len(items) // 2
        return _run_isolating(model, items[:mid]) + _run_isolating(model, items[mid:])
    return [ItemResult(outputs=o) for o in outputs]


def _error(what: str, exc: Exception) -> ErrorInfo:
    # Our own errors keep their code (e.g. non_finite_output); anything else is the model's.
    code = exc.code if isinstance(exc, InferlaneError) else ModelFailed.code
    return ErrorInfo(code=code, message=f"{what}: {type(exc).__name__}: {exc}")
