"""Compute threads under a watchdog, for hung models.

Python cannot stop a thread, so a batch that overruns its model's compute timeout is
abandoned instead: its requests fail with ``model_timeout``, the thread stuck in it is
left behind (a daemon, so it never holds the process), and the batches queued behind it
move to a fresh thread. Every abandoned thread is counted (metric and log); past a limit
the backend reports itself unhealthy, so that the worker exits and its supervisor starts
a clean process (uncommitted offsets make the restart safe).

A thread takes its queued batches highest lane first (in order within a lane), so a
high batch waits for the batch running, never for queued low ones.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry, Counter

from worker.base.blocking import own_thread
from worker.base.pending import Batch
from worker.scheduling.lanes import LANE_ORDER, lane_of

log = logging.getLogger(__name__)

R = TypeVar("R")
_names = itertools.count(1)

# How often the watchdog looks at the running batches: the timeout's precision.
WATCH_PERIOD_S = 0.05

_order = itertools.count()  # FIFO within a lane; the end marker sorts after every lane
_LAST = len(LANE_ORDER)

# (lane rank, arrival, job); a job is None for the end marker.
Queued = tuple[int, int, tuple[Batch, Future[R]] | None]


def _queued(job: tuple[Batch, Future[R]] | None) -> Queued[R]:
    rank = _LAST if job is None else LANE_ORDER.index(lane_of(job[0]))
    return rank, next(_order), job


class ComputeUnhealthy(RuntimeError):
    """Too many compute threads hung: the process should be restarted."""


@dataclass(frozen=True, slots=True)
class Running(Generic[R]):
    batch: Batch
    future: Future[R]
    started_s: float  # monotonic


def settle(future: Future[R], outcome: R | BaseException) -> None:
    """Resolve ``future`` unless something (a timeout, a cancel) already did."""
    with contextlib.suppress(InvalidStateError):
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)


class ComputeThread(Generic[R]):
    """One daemon thread running queued batches by lane; ``lock`` is its owner's, held
    while the thread publishes what it is running, so the watchdog and the thread agree
    on whether a batch finished or was abandoned."""

    def __init__(self, work: Callable[[Batch], R], lock: threading.Lock) -> None:
        self._number = next(_names)
        self.name = f"inferlane-compute-{self._number}"
        self.jobs: queue.PriorityQueue[Queued[R]] = queue.PriorityQueue()
        self.running: Running[R] | None = None
        self.abandoned = False
        self._work = work
        self._lock = lock
        self._thread = own_thread(f"compute-{self._number}", self._loop)

    def join(self, timeout_s: float) -> bool:
        """True once the thread has ended."""
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def hand_over(self, to: ComputeThread[R]) -> None:
        """Move every queued job to ``to`` (the caller holds the lock)."""
        while True:
            try:
                to.jobs.put(self.jobs.get_nowait())
            except queue.Empty:
                return

    def _loop(self) -> None:
        while True:
            job = self.jobs.get()[2]
            if job is None:
                return
            batch, future = job
            if not future.set_running_or_notify_cancel():
                continue
            running = Running(batch, future, time.monotonic())
            with self._lock:
                self.running = running
            outcome: R | BaseException
            try:
                outcome = self._work(batch)
            except BaseException as exc:  # carried to the submitter, as a pool would
                outcome = exc
            with self._lock:
                self.running = None
                abandoned = self.abandoned
            if abandoned:  # the watchdog has answered for this batch and moved on
                log.warning("%s: a hung batch of %r returned after all", self.name, batch.model)
                return
            settle(future, outcome)


@dataclass(frozen=True, slots=True)
class Overrun(Generic[R]):
    """A batch the watchdog abandoned: ``thread`` is left behind in it."""

    thread: str
    running: Running[R]
    limit_s: float


class Supervised(Generic[R]):
    """A compute thread that a watchdog may replace: queued jobs move to a fresh thread
    and the hung one is left behind. ``work`` makes each thread's work function, so
    per-thread state (a CUDA stream, staging buffers) is never shared with a hung one."""

    def __init__(self, work: Callable[[], Callable[[Batch], R]]) -> None:
        self._work = work
        self._lock = threading.Lock()
        self._thread = ComputeThread(work(), self._lock)
        self.outstanding = 0  # batches put and not yet settled

    def put(self, batch: Batch, future: Future[R]) -> None:
        with self._lock:
            self.outstanding += 1
            self._thread.jobs.put(_queued((batch, future)))
        future.add_done_callback(self._settled)

    def _settled(self, _: Future[R]) -> None:
        with self._lock:
            self.outstanding -= 1

    def close(self) -> None:
        """Finish the queued jobs, then end the thread."""
        with self._lock:
            self._thread.jobs.put(_queued(None))
        while True:  # the watchdog may hand the queue, end marker included, to a new thread
            with self._lock:
                thread = self._thread
            if thread.join(WATCH_PERIOD_S) and thread is self._thread:
                return

    def abandon_overrun(
        self, timeout_s_for: Callable[[str], float | None], now_s: float
    ) -> Overrun[R] | None:
        """If the running batch has overrun its model's timeout: leave its thread behind,
        move the queue to a fresh one, and say which batch (its future is not settled)."""
        with self._lock:
            thread, running = self._thread, self._thread.running
            if running is None:
                return None
            limit_s = timeout_s_for(running.batch.model)
            if limit_s is None or now_s - running.started_s < limit_s:
                return None
            fresh = ComputeThread(self._work(), self._lock)  # first: making it may fail
            thread.abandoned = True
            thread.hand_over(fresh)
            self._thread = fresh
        return Overrun(thread.name, running, limit_s)


class HungThreads:
    """Counts abandoned compute threads; at ``limit`` the backend gives up (``unhealthy``)."""

    def __init__(self, limit: int | None, registry: CollectorRegistry | None) -> None:
        self.count = 0
        self.limit = limit
        self.unhealthy: Future[None] = Future()
        self._metric = Counter(
            "inferlane_hung_compute_threads",
            "Compute threads abandoned in a batch that overran its compute timeout",
            ["model"],
            registry=registry,
        )

    def report(self, thread_name: str, model: str, timeout_s: float) -> None:
        self.count += 1
        self._metric.labels(model).inc()
        log.error(
            "%s hung in a batch of %r for over %g s: its requests fail with model_timeout and "
            "a fresh compute thread takes over (%d hung so far, limit %s)",
            thread_name,
            model,
            timeout_s,
            self.count,
            self.limit,
        )
        if self.limit is not None and self.count >= self.limit:
            reason = ComputeUnhealthy(
                f"{self.count} compute threads hung (limit {self.limit}): restart the worker"
            )
            log.critical("%s", reason)
            settle(self.unhealthy, reason)
