"""Bulk work yields to high requests in the worker, at its own step boundaries.

From the admission of a high request until its result is on Kafka, bulk records are
neither admitted nor published; until its batch has computed, a lower lane does not
start a new batch either (its compute thread or CUDA launcher waits before the batch).
Steps already under way finish. So a lone high request shares the GIL, the cores (or
the device) with what the bulk lanes had started when it arrived, and the event loop and
the broker with that and the bulk lanes' compute, not with bulk fetches and publishing.
The bulk lanes' compute loses only the time from a high request's admission to its
computed batch, a few milliseconds; the rest of its stay delays bulk admission and
publishing, which the lanes' queued work and the sink's chunks absorb.

Two bounds keep the bulk lanes moving whatever the high traffic does: a high request
counts for at most ``MAX_HOLD_S`` after its admission (one that never leaves, a revoked
one, holds nothing longer), and holds draw on a budget that fills at ``share`` seconds
per second, up to ``share`` x ``WINDOW_S``: under dense high traffic the bulk lanes are
held at most that share of the time, and sparse high requests each find it full.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter

from consumers.contract import Priority
from worker.base.pending import Batch

MAX_HOLD_S = 0.1  # far above a high request's time in a busy worker (p99 12-55 ms)
WINDOW_S = 1.0  # the budget holds at most this many seconds' worth of its share


class YieldToHigh:
    """``arrived``/``left`` are called on the event loop; ``hold`` on compute threads,
    ``held`` on the loop. ``share`` None: never hold (the baseline, one FIFO lane)."""

    def __init__(
        self,
        share: float | None,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_hold_s: float = MAX_HOLD_S,
        window_s: float = WINDOW_S,
        metrics: CollectorRegistry | None = None,
    ) -> None:
        self._share = share or 0.0
        self._clock = clock
        self._max_hold_s = max_hold_s
        self._full_s = self._share * window_s
        self._budget_s = self._full_s  # hold time left, as of ``_at_s``
        self._at_s = clock()
        # High requests in the worker (admitted, result not yet on Kafka), oldest first:
        # until when each one counts; and those of them whose batch has not computed.
        self._in: deque[float] = deque()
        self._uncomputed: deque[float] = deque()
        self._since_s: float | None = None  # when the hold under way began
        self._changed = threading.Condition()
        self._opened = asyncio.Event()  # set on the loop when the last high request left
        self.held_s = 0.0  # every ended hold, summed (what the bulk lanes gave)
        self._held_total = Counter(
            "inferlane_bulk_yield_seconds",
            "Seconds bulk admission and publishing waited for high requests in the worker "
            "(lower lanes' next batches waited for the part before their batch computed)",
            registry=metrics,
        )

    def arrived(self, n: int, computing: int = 0) -> None:
        """``n`` high requests were admitted, ``computing`` of them bound for a lane's
        batch (the others already have their result, or are generated elsewhere)."""
        if n <= 0 or not self._share:
            return
        with self._changed:
            now = self._update(self._clock())
            self._in.extend([now + self._max_hold_s] * n)
            self._uncomputed.extend([now + self._max_hold_s] * min(n, computing))
            if self._since_s is None and self._budget_s > 0:
                self._since_s = now
                self._opened.clear()

    def computed(self, batch: Batch) -> None:
        """``batch`` has computed (called on its compute thread): its high requests no
        longer hold the lower lanes' next batches."""
        n = sum(p.lane == Priority.HIGH for p in batch.items)
        if n <= 0 or not self._share:
            return
        with self._changed:
            if not _drop(self._uncomputed, n):
                self._changed.notify_all()

    def left(self, n: int) -> None:
        """``n`` high requests' results are on Kafka."""
        if n <= 0 or not self._share:
            return
        with self._changed:
            if not _drop(self._in, n):
                self._uncomputed.clear()
                self._end(self._update(self._clock()))
                self._opened.set()

    def remaining_s(self, *, compute: bool = False) -> float:
        """How long bulk work should wait from now: 0 when it may go. ``compute``: a
        lower lane's next batch, which waits only for high requests not yet computed."""
        with self._changed:
            if self._since_s is None:
                return 0.0
            now = self._update(self._clock())
            for counted in (self._in, self._uncomputed):
                while counted and counted[0] <= now:
                    counted.popleft()
            drain = 1.0 - self._share  # the budget's net loss per second held
            budget_until = now + self._budget_s / drain if drain > 0 else float("inf")
            if not self._in or budget_until <= now:
                self._end(now)
                return 0.0
            waiting = self._uncomputed if compute else self._in
            if not waiting:
                return 0.0
            return min(waiting[-1], budget_until) - now

    def hold(self) -> None:
        """On a bulk compute thread, before a batch: wait while high requests wait for
        compute and the hold lasts."""
        while (wait_s := self.remaining_s(compute=True)) > 0:
            with self._changed:
                self._changed.wait(wait_s)

    async def held(self) -> None:
        """On the event loop, before a bulk step: wait while the hold lasts."""
        while (wait_s := self.remaining_s()) > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._opened.wait(), wait_s)

    def _update(self, now: float) -> float:
        """The budget as of ``now`` (the caller holds the lock): it fills at ``share``
        per second, and a hold under way draws one per second."""
        elapsed = max(0.0, now - self._at_s)
        spent = elapsed if self._since_s is not None else 0.0
        self._budget_s = min(self._full_s, self._budget_s + self._share * elapsed - spent)
        self._at_s = now
        return now

    def _end(self, now: float) -> None:
        """End the hold under way (the caller holds the lock): bulk work goes on."""
        if self._since_s is not None:
            self.held_s += now - self._since_s
            self._held_total.inc(now - self._since_s)
            self._since_s = None
        self._changed.notify_all()


def _drop(counted: deque[float], n: int) -> int:
    """Forget the ``n`` oldest of ``counted`` (or all of them); how many are left."""
    for _ in range(min(n, len(counted))):
        counted.popleft()
    return len(counted)
