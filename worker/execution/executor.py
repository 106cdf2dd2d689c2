"""Executors run batches off the event loop and hand back futures.

Contract: ``submit(batch)`` returns a ``concurrent.futures.Future`` that resolves to a
``BatchRun`` with exactly one ``ItemResult`` per item, in batch order. It does not
raise for a request's own failure: a batch that raises is bisected until the items
that fail alone are found (poison inputs; on a GPU this also splits batches that do
not fit in memory), and those items carry the error. A batch that runs longer than its
model's compute timeout resolves with ``model_timeout`` for every item, and the backend
carries on without it; a backend that can no longer serve (too many hung threads) says so
through ``fail_into``. Backends differ in where the forward pass runs: ``ThreadExecutor``
on CPU threads (one, or one per lane with the lower lanes' at lower OS priorities);
``worker.execution.cuda_lanes.CudaLaneExecutor`` on one CUDA stream per lane, with stream
priorities.

A batch of a job window's rows (``Batch.rows``) runs on the low lane and resolves to the
model's raw output (``BatchRun.output``) for the job to take apart itself; its failure
is raised to the submitter, who isolates the failing rows (``worker.jobs.compute``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from functools import partial
from typing import Any

import numpy as np
import torch
from prometheus_client import CollectorRegistry
from pydantic import JsonValue

from consumers.contract import ErrorInfo, Priority
from consumers.errors import InferlaneError, ModelFailed, ModelTimeout
from worker.base.blocking import own_thread
from worker.base.pending import Batch, BatchRun, ItemResult
from worker.execution.compute_threads import (
    WATCH_PERIOD_S,
    HungThreads,
    Overrun,
    Running,
    Supervised,
    settle,
)
from worker.execution.torch_threads import set_torch_threads
from worker.models import LoadedModel, ModelRegistry
from worker.scheduling.lanes import LANE_ORDER, lane_of
from worker.scheduling.yield_to_high import YieldToHigh
from worker.settings import ComputeConfig

log = logging.getLogger(__name__)


class Executor(ABC):
    # Whether each lane's batches run apart from the other lanes' (their own thread or
    # stream), so a lane's queue is its own; and whether a lower lane's batch in progress
    # gives way to a higher one (the OS preempts a niced thread; a CUDA stream priority
    # orders pending kernels only).
    lanes_apart: bool = False
    preempts: bool = False

    def slots(self, lane: Priority) -> int:
        """How many of ``lane``'s batches run at once."""
        return 1

    @abstractmethod
    def submit(self, batch: Batch) -> Future[BatchRun]: ...

    @abstractmethod
    def shutdown(self) -> None:
        """Finish the batches already submitted, then release the backend."""

    def fail_into(self, failed: asyncio.Future[None]) -> None:  # noqa: B027
        """Set ``failed``'s exception, from any thread, if this backend gives up; a
        backend that never gives up keeps this default, which does nothing."""


class SupervisedExecutor(Executor):
    """What the thread-based backends share: compute threads (``Supervised``) under one
    watchdog. With ``timeout_s_for`` (seconds per model name, None: no limit), the
    watchdog abandons a batch that overruns (see ``worker.execution.compute_threads``);
    ``max_hung_threads`` abandoned threads make the backend unhealthy (None: never).
    """

    def __init__(
        self,
        threads: Sequence[Supervised[BatchRun]],
        *,
        timeout_s_for: Callable[[str], float | None] | None,
        max_hung_threads: int | None,
        metrics: CollectorRegistry | None,
    ) -> None:
        self._threads = threads
        self._timeout_s_for = timeout_s_for
        self.hung = HungThreads(max_hung_threads, metrics)
        self._closed = threading.Event()
        if timeout_s_for is not None:
            own_thread("compute-watchdog", self._watch)

    def shutdown(self) -> None:
        for thread in self._threads:
            thread.close()
        self._closed.set()

    def fail_into(self, failed: asyncio.Future[None]) -> None:
        loop = failed.get_loop()

        def forward(unhealthy: Future[None]) -> None:
            exc = unhealthy.exception()
            if exc is not None:
                with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                    loop.call_soon_threadsafe(_fail, failed, exc)

        self.hung.unhealthy.add_done_callback(forward)

    def _abandoned(self, overrun: Overrun[BatchRun]) -> None:
        """Called after the watchdog answered for ``overrun``; a backend that holds
        something for a running batch releases it here."""

    def _watch(self) -> None:
        assert self._timeout_s_for is not None
        while not self._closed.wait(WATCH_PERIOD_S):
            for thread in self._threads:
                overrun = thread.abandon_overrun(self._timeout_s_for, time.monotonic())
                if overrun is None:
                    continue
                settle(overrun.running.future, timed_out(overrun.running, overrun.limit_s))
                self._abandoned(overrun)
                self.hung.report(overrun.thread, overrun.running.batch.model, overrun.limit_s)


def timeouts(registry: ModelRegistry, config: ComputeConfig) -> Callable[[str], float | None]:
    """Compute timeout per model: a model's own ``compute_timeout_s`` wins over the default."""

    def timeout_s_for(model: str) -> float | None:
        return registry.spec(model).compute_timeout_s or config.timeout_s

    return timeout_s_for


class ThreadExecutor(SupervisedExecutor):
    """CPU compute threads; torch parallelizes inside each forward pass. Either one
    thread, taking queued batches highest lane first, or (``nice``) threads per lane, each
    at its lane's Linux nice value: a high batch then starts at once beside a bulk batch
    in progress, and the OS gives it the cores (what a stream priority is on a GPU, but
    preemptive). There the high lane has one thread on all of torch's threads, and the
    lower lanes ``replicas`` each (at most one per torch thread), sharing them out. A
    model's batch goes to whichever of the first ``replicas_for(model)`` of its lane's
    threads has the fewest outstanding. With ``yield_to_high``, the lower lanes' threads
    wait before each batch while high requests are in the worker (lane threads only: one
    shared thread would hold the high batch queued behind the waiting one), until the
    high batches have computed. Job windows
    (``Batch.rows``) have a thread of their own at the low lane's nice value on all of
    torch's threads: a low lane split into replicas would halve a job's speed when no
    live traffic competes for the cores."""

    def __init__(
        self,
        resolve: Callable[[str], LoadedModel],
        *,
        nice: dict[Priority, int] | None = None,
        replicas: int = 1,
        replicas_for: Callable[[str], int] | None = None,
        timeout_s_for: Callable[[str], float | None] | None = None,
        max_hung_threads: int | None = None,
        metrics: CollectorRegistry | None = None,
        yield_to_high: YieldToHigh | None = None,
    ) -> None:
        # ``resolve`` loads on first use, in the compute thread.
        work = partial(run_batch, resolve)
        self._replicas_for = replicas_for
        self._lanes: dict[Priority, list[Supervised[BatchRun]]]
        if nice is None:
            one = Supervised(lambda: work)
            self._lanes = {lane: [one] for lane in LANE_ORDER}
            self._rows = one
        else:
            threads = torch.get_num_threads()
            bulk = max(1, min(replicas, threads))
            self._lanes = {}
            for lane in LANE_ORDER:
                n = 1 if lane == Priority.HIGH else bulk
                high = lane == Priority.HIGH
                make = _lane_thread(
                    work,
                    nice=nice[lane],
                    torch_threads=threads // n,
                    hold=None if high else yield_to_high,
                    done=yield_to_high if high else None,
                )
                self._lanes[lane] = [Supervised(make) for _ in range(n)]
            low = nice[Priority.LOW]
            self._rows = Supervised(
                _lane_thread(work, nice=low, torch_threads=threads, hold=yield_to_high)
            )
            self.lanes_apart = self.preempts = True
        every = [t for lane_threads in self._lanes.values() for t in lane_threads]
        every.append(self._rows)
        super().__init__(
            list(dict.fromkeys(every)),
            timeout_s_for=timeout_s_for,
            max_hung_threads=max_hung_threads,
            metrics=metrics,
        )

    @classmethod
    def configured(
        cls,
        registry: ModelRegistry,
        config: ComputeConfig,
        metrics: CollectorRegistry,
        yield_to_high: YieldToHigh | None = None,
    ) -> ThreadExecutor:
        return cls(
            registry.get,
            nice=config.nice() if config.lane_threads else None,
            replicas=config.replicas,
            replicas_for=lambda model: registry.spec(model).replicas or config.replicas,
            timeout_s_for=timeouts(registry, config),
            max_hung_threads=config.max_hung_threads,
            metrics=metrics,
            yield_to_high=yield_to_high,
        )

    def slots(self, lane: Priority) -> int:
        return len(self._lanes[lane])

    def submit(self, batch: Batch) -> Future[BatchRun]:
        future: Future[BatchRun] = Future()
        if batch.rows is not None:
            self._rows.put(batch, future)
            return future
        threads = self._lanes[lane_of(batch)]
        if self._replicas_for is not None:
            threads = threads[: self._replicas_for(batch.model)]
        min(threads, key=lambda t: t.outstanding).put(batch, future)
        return future


def _lane_thread(
    work: Callable[[Batch], BatchRun],
    *,
    nice: int,
    torch_threads: int,
    hold: YieldToHigh | None = None,
    done: YieldToHigh | None = None,
) -> Callable[[], Callable[[Batch], BatchRun]]:
    """Work for a lane's compute thread that first adds ``nice`` to its own nice value
    and sets its own torch thread count, waits on ``hold`` before each batch and tells
    ``done`` after it (the high lane: lower lanes wait for its batches). Linux
    nice values are per thread, and the OpenMP threads a thread starts for torch inherit
    its value; OpenMP thread counts are per thread too."""

    def make() -> Callable[[Batch], BatchRun]:
        ready = False

        def run(batch: Batch) -> BatchRun:
            nonlocal ready
            if not ready:
                ready = True
                lower_priority(nice)
                set_torch_threads(torch_threads)
            if hold is not None:
                hold.hold()
            try:
                return work(batch)
            finally:
                if done is not None:
                    done.computed(batch)

        return run

    return make


def lower_priority(nice: int) -> None:
    """Add ``nice`` to the calling thread's Linux nice value (threads it starts inherit it)."""
    if not nice:
        return
    tid = threading.get_native_id()
    try:
        value = min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice)
        os.setpriority(os.PRIO_PROCESS, tid, value)
    except OSError as exc:  # e.g. a sandbox that forbids it: run unniced
        log.warning("could not lower a compute thread's priority: %s", exc)


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


# How a backend runs prepared items through a model: one output per item, or raise.
RunItems = Callable[[LoadedModel, Sequence[Any]], list[JsonValue]]


def run_batch(
    resolve: Callable[[str], LoadedModel], batch: Batch, run: RunItems = LoadedModel.run
) -> BatchRun:
    """Items whose deadline passed while the batch waited for the compute thread are
    not computed: they come back ``expired``. ``run`` is the backend's forward pass.
    A rows batch has no deadline; a model that cannot load or raises raises here."""
    started = time.monotonic()
    if batch.rows is not None:
        model = resolve(batch.model)
        output = forward_rows(model, batch.rows)
        return BatchRun([], model.version, started, time.monotonic() - started, output)
    alive = [p.deadline_s is None or p.deadline_s > started for p in batch.items]
    live = [p for p, ok in zip(batch.items, alive, strict=True) if ok]
    if not live:
        return BatchRun([ItemResult(expired=True) for _ in batch.items], None, started, 0.0)
    try:
        model = resolve(batch.model)
    except Exception as exc:  # a model that cannot load fails its requests, not the worker
        error = item_error(f"model {batch.model!r} could not be loaded", exc)
        return BatchRun([ItemResult(error=error) for _ in batch.items], None, started, 0.0)
    computed = iter(run_isolating(partial(run, model), [p.item for p in live]))
    results = [next(computed) if ok else ItemResult(expired=True) for ok in alive]
    return BatchRun(results, model.version, started, time.monotonic() - started)


def forward_rows(model: LoadedModel, rows: Any) -> Any:
    """A job window's rows through ``model`` (a numeric matrix is already collated); a
    tensor output comes back on the host, so the job's thread never waits on a device."""
    if isinstance(rows, np.ndarray):
        output = model.forward_collated(torch.from_numpy(rows))
    else:
        output = model.forward(rows)
    return output.detach().cpu() if isinstance(output, torch.Tensor) else output


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
