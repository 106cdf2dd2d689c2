"""When CPython's cyclic garbage collector scans the whole heap, and how long it stops us.

CPython runs a full (oldest-generation) pass whenever the objects promoted since the
last one reach a quarter of those it kept. Under a backlog every in-flight request's
objects live long enough to be promoted, so full passes come every fraction of a second,
each stopping every Python thread for as long as scanning every live object takes
(docs/SCHEDULING.md, "Garbage collection"). What exists after warm-up (modules, models)
lives as long as the process, so it is frozen out of every pass; the young passes run
as CPython schedules them (they reclaim the short cycles); the full pass runs on this
schedule instead. Cyclic garbage that outlives the young passes waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from typing import Any

from prometheus_client import CollectorRegistry, Histogram

from worker.settings import GcConfig

# A threshold for the oldest generation that its counter (young passes since the last
# full one) cannot reach in a process's life.
_NEVER = 2**31 - 1
_PAUSE_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)

# Several workers may run in one process (tests do): the thresholds are the process's,
# so the first holder turns the rule off and the last one puts the thresholds back.
_holders = 0
_saved: tuple[int, int, int] | None = None


def hold_full_passes() -> None:
    """CPython's rule for full passes off, until as many ``release_full_passes``."""
    global _holders, _saved
    if _holders == 0:
        _saved = gc.get_threshold()
        young, middle, _ = _saved
        gc.set_threshold(young, middle, _NEVER)
    _holders += 1


def release_full_passes() -> None:
    global _holders
    _holders -= 1
    if _holders == 0 and _saved is not None:
        gc.set_threshold(*_saved)


class GcSchedule:
    """Freezes the warm heap, runs full passes every ``full_every_s``, times every pass."""

    def __init__(self, config: GcConfig, metrics: CollectorRegistry) -> None:
        self._every_s = config.full_every_s
        pauses = Histogram(
            "inferlane_gc_pause_seconds",
            "Cyclic garbage collector passes (every Python thread stops), by generation",
            ["generation"],
            buckets=_PAUSE_BUCKETS_S,
            registry=metrics,
        )
        self._pauses = [pauses.labels(str(g)) for g in range(3)]
        self._began = 0.0
        self._task: asyncio.Task[None] | None = None  # the full passes, while they run

    def start(self) -> None:
        """Call once the models are warm: what exists now is never garbage."""
        gc.freeze()
        gc.callbacks.append(self._timed)
        if self._every_s is None:
            return
        hold_full_passes()
        self._task = asyncio.create_task(self._full_passes(), name="inferlane-gc")

    async def stop(self) -> None:
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._timed)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
            release_full_passes()

    async def _full_passes(self) -> None:
        assert self._every_s is not None
        while True:
            await asyncio.sleep(self._every_s)
            gc.collect()

    def _timed(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self._pauses[info["generation"]].observe(time.perf_counter() - self._began)
