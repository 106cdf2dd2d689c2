"""Executors run batches off the event loop and hand back futures.

Contract: ``submit(batch)`` returns a ``concurrent.futures.Future`` that resolves to a
``BatchRun`` with exactly one ``ItemResult`` per item, in batch order. It does not
raise for a request's own failure: a batch that raises is bisected until the items
that fail alone are found (poison inputs; on a GPU this also splits batches that do
not fit in memory), and those items carry the error. A batch that runs longer than its
model's compute timeout resolves with ``model_timeout`` for every item, and the backend
carries on without it; a backend that can no longer serve (too many hung threads) says so
through ``fail_into``. Backends differ in where the forward pass runs: ``ThreadExecutor``
on a dedicated CPU thread; a CUDA-stream backend plugs in behind the same interface.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry
from pydantic import JsonValue

from consumers.contract import ErrorInfo
from consumers.errors import InferlaneError, ModelFailed, ModelTimeout
from worker.compute_threads import ComputeThread, HungThreads, Running, settle
from worker.config import ComputeConfig
from worker.models import LoadedModel, ModelRegistry
from worker.pending import Batch, ItemResult

# How often the watchdog looks at the running batch: the timeout's precision.
_WATCH_PERIOD_S = 0.05


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

    def fail_into(self, failed: asyncio.Future[None]) -> None:  # noqa: B027
        """Set ``failed``'s exception, from any thread, if this backend gives up; a
        backend that never gives up keeps this default, which does nothing."""


class ThreadExecutor(Executor):
    """One compute thread: torch parallelizes inside the forward pass, and a single
    submitter keeps batches in order without contention on the model.

    With ``timeout_s_for`` (seconds per model name, None: no limit), a watchdog abandons a
    batch that overruns (see ``worker.compute_threads``); ``max_hung_threads`` abandoned
    threads make the backend unhealthy (None: never).
    """

    def __init__(
        self,
        resolve: Callable[[str], LoadedModel],
        *,
        timeout_s_for: Callable[[str], float | None] | None = None,
        max_hung_threads: int | None = None,
        metrics: CollectorRegistry | None = None,
    ) -> None:
        self._resolve = resolve  # loads on first use, in the compute thread
        self._timeout_s_for = timeout_s_for
        self._lock = threading.Lock()
        self._thread = self._fresh_thread()
        self.hung = HungThreads(max_hung_threads, metrics)
        self._closed = threading.Event()
        if timeout_s_for is not None:
            threading.Thread(
                target=self._watch, name="inferlane-compute-watchdog", daemon=True
            ).start()

    @classmethod
    def configured(
        cls, registry: ModelRegistry, config: ComputeConfig, metrics: CollectorRegistry
    ) -> ThreadExecutor:
        """From settings: a model's own ``compute_timeout_s`` wins over the default."""

        def timeout_s_for(model: str) -> float | None:
            return registry.spec(model).compute_timeout_s or config.timeout_s

        return cls(
            registry.get,
            timeout_s_for=timeout_s_for,
            max_hung_threads=config.max_hung_threads,
            metrics=metrics,
        )

    def submit(self, batch: Batch) -> Future[BatchRun]:
        future: Future[BatchRun] = Future()
        with self._lock:
            self._thread.jobs.put((batch, future))
        return future

    def shutdown(self) -> None:
        with self._lock:
            self._thread.jobs.put(None)
        while True:  # the watchdog may hand the queue, end marker included, to a new thread
            with self._lock:
                thread = self._thread
            if thread.join(_WATCH_PERIOD_S) and thread is self._thread:
                break
        self._closed.set()

    def fail_into(self, failed: asyncio.Future[None]) -> None:
        loop = failed.get_loop()

        def forward(unhealthy: Future[None]) -> None:
            exc = unhealthy.exception()
            if exc is not None:
                with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                    loop.call_soon_threadsafe(_fail, failed, exc)

        self.hung.unhealthy.add_done_callback(forward)

    def _fresh_thread(self) -> ComputeThread[BatchRun]:
        return ComputeThread(lambda batch: run_batch(self._resolve, batch), self._lock)

    def _watch(self) -> None:
        assert self._timeout_s_for is not None
        while not self._closed.wait(_WATCH_PERIOD_S):
            with self._lock:
                thread, running = self._thread, self._thread.running
                if running is None:
                    continue
                limit_s = self._timeout_s_for(running.batch.model)
                if limit_s is None or time.monotonic() - running.started_s < limit_s:
                    continue
                thread.abandoned = True
                self._thread = self._fresh_thread()
                thread.hand_over(self._thread)
            settle(running.future, timed_out(running, limit_s))
            self.hung.report(thread.name, running.batch.model, limit_s)


def _fail(failed: asyncio.Future[None], exc: BaseException) -> None:
    if not failed.done():
        failed.set_exception(exc)


def timed_out(running: Running[BatchRun], limit_s: float) -> BatchRun:
    """Every item of an abandoned batch fails with ``model_timeout``."""
    error = ErrorInfo(
        code=ModelTimeout.code,
        message=f"model {running.batch.model!r} ran past its compute timeout of {limit_s:g} s "
        "on the batch holding this request; the batch was abandoned",
    )
    elapsed_s = time.monotonic() - running.started_s
    return BatchRun(
        [ItemResult(error=error) for _ in running.batch.items], None, running.started_s, elapsed_s
    )


def run_batch(resolve: Callable[[str], LoadedModel], batch: Batch) -> BatchRun:
    """Items whose deadline passed while the batch waited for the compute thread are
    not computed: they come back ``expired``."""
    started = time.monotonic()
    alive = [p.deadline_s is None or p.deadline_s > started for p in batch.items]
    live = [p for p, ok in zip(batch.items, alive, strict=True) if ok]
    if not live:
        return BatchRun([ItemResult(expired=True) for _ in batch.items], None, started, 0.0)
    try:
        model = resolve(batch.model)
    except Exception as exc:  # a model that cannot load fails its requests, not the worker
        error = item_error(f"model {batch.model!r} could not be loaded", exc)
        return BatchRun([ItemResult(error=error) for _ in batch.items], None, started, 0.0)
    computed = iter(run_isolating(model.run, [p.item for p in live]))
    results = [next(computed) if ok else ItemResult(expired=True) for ok in alive]
    return BatchRun(results, model.version, started, time.monotonic() - started)


def run_isolating(
    run: Callable[[Sequence[Any]], list[JsonValue]], items: Sequence[Any]
) -> list[ItemResult]:
    """``run`` (prepared items in, one output per item out) on ``items``; a batch that
    raises is bisected until the items that fail alone are found, and only those carry
    the error."""
    try:
        outputs = run(items)
    except Exception as exc:
        if len(items) == 1:
            return [ItemResult(error=item_error("model raised on this input", exc))]
        mid = len(items) // 2
        return run_isolating(run, items[:mid]) + run_isolating(run, items[mid:])
    return [ItemResult(outputs=o) for o in outputs]


def item_error(what: str, exc: Exception) -> ErrorInfo:
    """The error one request gets when ``exc`` is its own failure: our errors keep their
    code (e.g. non_finite_output); anything else is the model's (model_error)."""
    code = exc.code if isinstance(exc, InferlaneError) else ModelFailed.code
    return ErrorInfo(code=code, message=f"{what}: {type(exc).__name__}: {exc}")
