"""The dispatch step: whenever the executor has room, ask the batcher for a batch, run
it once its model is loaded, and hand what came of it on.

One task on the event loop. A finished batch goes to every ``BatchObserver`` (the
scheduler, drift, rollouts, the input samples), then its outcomes to ``finish``
(delivery); items whose deadline passed while they waited end as ``expired``. The
metrics count a batch as it is dispatched (``count``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from typing import Protocol

from consumers.contract import Priority
from worker.base.outcomes import completed, expired
from worker.base.pending import Batch, BatchRun, Outcome
from worker.base.urgent_loop import Boost, boost_current, is_urgent, urgent_context
from worker.execution.executor import Executor
from worker.models import ModelRegistry
from worker.scheduling.batcher import Batcher
from worker.scheduling.lanes import LANE_ORDER, lane_of
from worker.scheduling.scheduler import Scheduler
from worker.settings import BatchConfig


class BatchObserver(Protocol):
    """Told of every batch the executor finished, with the outcomes it gave (on the
    event loop: quick, or queued for a thread of its own)."""

    def batch_done(self, batch: Batch, run: BatchRun, outcomes: Sequence[Outcome]) -> None: ...


class Dispatch:
    def __init__(
        self,
        config: BatchConfig,
        batcher: Batcher,
        scheduler: Scheduler,
        executor: Executor,
        registry: ModelRegistry,
        *,
        observers: Sequence[BatchObserver],
        finish: Callable[[list[Outcome]], None],
        count: Callable[[Batch], None],
        failed: Callable[[BaseException], None],
    ) -> None:
        self._prefetch = config.prefetch
        self._batcher = batcher
        self._scheduler = scheduler
        self._executor = executor
        self._registry = registry
        self._observers = observers
        self._finish = finish
        self._count = count
        self._failed = failed  # our bug in a batch's end: the worker stops with it
        self._running: Counter[Priority] = Counter()  # batches in the executor, by lane
        self._wake = asyncio.Event()  # new requests or a free executor slot
        self._boost = Boost()  # run()'s: on while a wake from urgent work is unplanned
        self.closed = False  # set on stop: nothing more may start

    def wake(self) -> None:
        # Woken by urgent work (a high record admitted): plan it urgent-first too.
        if is_urgent():
            self._boost.on = True
        self._wake.set()

    async def run(self) -> None:
        self._boost = boost_current()
        while True:
            self._wake.clear()
            self._boost.on = False
            now = time.monotonic()
            if open_lanes := self._open_lanes():
                plan = self._batcher.plan(now, idle=self._idle_lanes(), lanes=open_lanes)
            else:  # the executor is full: only expire what waited past its deadline
                plan = self._batcher.sweep(now)
            if plan.expired:
                self._scheduler.expired(plan.expired)
                self._finish([expired(p, now) for p in plan.expired])
            if plan.batch is not None:
                self._dispatch(plan.batch)
                continue
            wake_at = plan.wake_at_s
            timeout = None if wake_at is None else max(0.0, wake_at - time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    def _open_lanes(self) -> list[Priority]:
        """The lanes that may form a batch: ``prefetch`` counts a lane's batches in the
        executor beyond those it runs at once, and on a single compute thread those of
        the lanes above it too, so queued low batches never hold a high one back (the
        thread runs queued batches highest lane first)."""
        ahead = 0
        open_lanes = []
        for lane in LANE_ORDER:
            ahead = self._running[lane] + (0 if self._executor.lanes_apart else ahead)
            if ahead < self._prefetch + self._executor.slots(lane) - 1:
                open_lanes.append(lane)
        return open_lanes

    def _idle_lanes(self) -> Collection[Priority]:
        """The lanes whose compute has room to start a batch now: where lanes run apart,
        each lane's own; on one thread, every lane or none."""
        if self._executor.lanes_apart:
            slots = self._executor.slots
            return [lane for lane in LANE_ORDER if self._running[lane] < slots(lane)]
        return () if any(self._running.values()) else LANE_ORDER

    def _dispatch(self, batch: Batch) -> None:
        ready = self._registry.ensure(batch.model)  # one load, on the store's loader thread
        if not ready.done():  # other models' batches run meanwhile
            loop = asyncio.get_running_loop()
            ready.add_done_callback(lambda _: loop.call_soon_threadsafe(self._submit, batch))
            return
        self._submit(batch)

    def _submit(self, batch: Batch) -> None:
        if self.closed:  # its model loaded after stop(): uncommitted, so replayed later
            return
        self._running[lane_of(batch)] += 1
        self._count(batch)
        self._scheduler.dispatched(batch)
        # A high batch's end is urgent on the loop; its threadsafe hop is our own, as
        # asyncio.wrap_future's would run in the compute thread's (ordinary) context.
        context = urgent_context() if lane_of(batch) == Priority.HIGH else None
        loop = asyncio.get_running_loop()

        def ended(future: concurrent.futures.Future[BatchRun]) -> None:
            if not loop.is_closed():  # else the worker is gone: the batch replays
                loop.call_soon_threadsafe(self._done, batch, future, context=context)

        self._executor.submit(batch).add_done_callback(ended)

    def _done(self, batch: Batch, future: concurrent.futures.Future[BatchRun]) -> None:
        self._running[lane_of(batch)] -= 1
        self._wake.set()
        try:
            # Executors report item failures as values; an exception here is our bug.
            run = future.result()
            outcomes = completed(batch, run, self._registry.adapter(batch.model))
            for observer in self._observers:
                observer.batch_done(batch, run, outcomes)
        except Exception as exc:
            self._failed(exc)
            return
        self._finish(outcomes)
