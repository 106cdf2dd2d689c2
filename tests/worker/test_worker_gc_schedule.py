"""The collector schedule: full passes on a timer instead of CPython's rule, young
passes left as they are, every pass timed, the process's thresholds put back."""

from __future__ import annotations

import asyncio
import gc
import weakref

from prometheus_client import CollectorRegistry

from bench.gc_hold import without_full_passes
from worker.execution.gc_schedule import GcSchedule
from worker.settings import GcConfig


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def old_cycle() -> weakref.ref[Node]:
    """A reference cycle in the oldest generation, unreachable: only a full pass frees it."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    gc.collect(1)  # alive now: the survivors of a middle pass move to the oldest generation
    return weakref.ref(a)


def churn(containers: int = 400_000) -> None:
    """Enough container allocations, kept alive a while, for many young passes."""
    kept: list[list[int]] = []
    for i in range(containers):
        kept.append([i])
        if len(kept) > 5000:
            kept.clear()


def passes(registry: CollectorRegistry, generation: int) -> float:
    value = registry.get_sample_value(
        "inferlane_gc_pause_seconds_count", {"generation": str(generation)}
    )
    return value or 0.0


async def test_the_full_pass_runs_on_the_schedule_not_on_cpythons_rule() -> None:
    registry = CollectorRegistry()
    before = gc.get_threshold()
    schedule = GcSchedule(GcConfig(full_every_s=0.5), registry)
    schedule.start()
    try:
        young_passes = passes(registry, 0)
        ref = old_cycle()
        churn()  # CPython's rule would have run a full pass by now
        assert ref() is not None
        assert passes(registry, 0) > young_passes  # the young passes still run, timed
        assert passes(registry, 2) == 0
        for _ in range(40):
            await asyncio.sleep(0.05)
            if ref() is None:
                break
        assert ref() is None  # the scheduled pass freed it
        assert passes(registry, 2) >= 1
    finally:
        await schedule.stop()
    assert gc.get_threshold() == before


async def test_cpythons_rule_still_frees_old_cycles_without_a_schedule() -> None:
    """The control for the test above: the same churn frees the cycle by itself."""
    registry = CollectorRegistry()
    schedule = GcSchedule(GcConfig(full_every_s=None), registry)
    schedule.start()
    try:
        ref = old_cycle()
        churn()
        assert ref() is None
        assert passes(registry, 2) >= 1
    finally:
        await schedule.stop()


async def test_thresholds_come_back_when_the_last_of_two_schedules_stops() -> None:
    before = gc.get_threshold()
    registry = CollectorRegistry()
    first = GcSchedule(GcConfig(full_every_s=30), registry)
    second = GcSchedule(GcConfig(full_every_s=30), CollectorRegistry())
    first.start()
    second.start()
    scheduled = gc.get_threshold()
    assert scheduled[:2] == before[:2] and scheduled[2] > 10**9
    await first.stop()
    assert gc.get_threshold() == scheduled  # the second still runs its own full passes
    await second.stop()
    assert gc.get_threshold() == before
    timed = passes(registry, 0)
    churn()
    assert passes(registry, 0) == timed  # a stopped schedule no longer times passes


async def test_a_block_without_full_passes_nests_with_a_schedule() -> None:
    before = gc.get_threshold()
    with without_full_passes():
        schedule = GcSchedule(GcConfig(full_every_s=30), CollectorRegistry())
        schedule.start()
        await schedule.stop()
        assert gc.get_threshold()[2] > 10**9  # the schedule's stop left the block's rule
        ref = old_cycle()
        churn()
        assert ref() is not None  # no full pass ran inside the block
    assert gc.get_threshold() == before
    gc.collect()
    assert ref() is None
