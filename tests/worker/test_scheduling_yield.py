"""Bulk work yields to high requests in the worker: when a hold starts and ends, and
what it may cost the bulk lanes (a seeded simulation of the rule)."""

from __future__ import annotations

import asyncio
import random
import threading

import pytest
from pipeline_factories import pending

from consumers.contract import Priority
from worker.base.pending import Batch
from worker.scheduling.yield_to_high import MAX_HOLD_S, WINDOW_S, YieldToHigh


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_bulk_work_waits_from_a_high_arrival_until_the_last_high_result_leaves() -> None:
    clock = Clock()
    gate = YieldToHigh(0.1, clock=clock)
    assert gate.remaining_s() == 0
    gate.arrived(2)
    assert gate.remaining_s() == pytest.approx(MAX_HOLD_S)
    clock.now += 0.004
    gate.left(1)
    assert gate.remaining_s() == pytest.approx(MAX_HOLD_S - 0.004)  # one still in
    clock.now += 0.003
    gate.left(1)
    assert gate.remaining_s() == 0
    assert gate.held_s == pytest.approx(0.007)


def test_a_lost_high_request_holds_bulk_work_for_its_limit_and_nothing_later() -> None:
    """A high request that never leaves (its partition revoked) holds bulk work for at
    most ``MAX_HOLD_S``; a later one holds it until its own result leaves."""
    clock = Clock()
    gate = YieldToHigh(0.5, clock=clock)
    gate.arrived(1)
    clock.now += MAX_HOLD_S
    assert gate.remaining_s() == 0
    clock.now += 1.0
    gate.arrived(1)
    assert gate.remaining_s() == pytest.approx(MAX_HOLD_S)
    clock.now += 0.005
    gate.left(1)
    assert gate.remaining_s() == 0


def test_no_share_never_holds() -> None:
    gate = YieldToHigh(None, clock=Clock())
    gate.arrived(5)
    assert gate.remaining_s() == 0
    assert gate.held_s == 0


def _simulate(gate: YieldToHigh, clock: Clock, gaps_s: list[float], stay_s: float) -> float:
    """High requests arriving after ``gaps_s``, each in the worker ``stay_s``, the gate
    asked every 1 ms as a bulk thread would; returns the seconds bulk work was held."""
    leaves: list[float] = []
    arrivals, t = [], clock.now
    for gap in gaps_s:
        t += gap
        arrivals.append(t)
    end = t + 1.0
    while clock.now < end:
        while arrivals and arrivals[0] <= clock.now:
            arrivals.pop(0)
            gate.arrived(1)
            leaves.append(clock.now + stay_s)
        while leaves and leaves[0] <= clock.now:
            leaves.pop(0)
            gate.left(1)
        gate.remaining_s()
        clock.now += 0.001
    return gate.held_s


def test_sparse_high_requests_are_each_held_for_their_whole_stay() -> None:
    """One every 100-500 ms, each 10 ms in the worker: every stay is a hold."""
    rng, clock = random.Random(7), Clock()
    gate = YieldToHigh(0.1, clock=clock)
    gaps = [rng.uniform(0.1, 0.5) for _ in range(100)]
    held = _simulate(gate, clock, gaps, stay_s=0.010)
    assert held == pytest.approx(100 * 0.010, rel=0.15)


@pytest.mark.parametrize("every_s", [0.002, 0.01, 0.05])
def test_dense_high_requests_hold_bulk_work_at_most_its_share(every_s: float) -> None:
    """Under dense high traffic the holds take at most ``share`` of the time, and one
    full budget more (``share`` x ``WINDOW_S``, saved up while nothing held)."""
    clock = Clock()
    gate = YieldToHigh(0.1, clock=clock)
    seconds = 5.0
    held = _simulate(gate, clock, [every_s] * int(seconds / every_s), stay_s=0.02)
    simulated_s = seconds + 1.0  # the last second drains what is still in the worker
    assert 0.09 * seconds <= held <= 0.1 * (simulated_s + WINDOW_S)


def test_a_waiting_bulk_thread_goes_when_the_high_batch_has_computed() -> None:
    """A lower lane's next batch waits only for high requests bound for a batch, until
    that batch has computed; bulk steps on the loop wait until the result leaves."""
    gate = YieldToHigh(0.1, clock=Clock(), max_hold_s=3600)  # a frozen clock: no timeout
    gate.arrived(2, computing=1)  # one of them was rejected at admission
    assert gate.remaining_s(compute=True) > 0
    waiting = threading.Event()
    done = threading.Event()

    def bulk() -> None:
        waiting.set()
        gate.hold()
        done.set()

    thread = threading.Thread(target=bulk, daemon=True)
    thread.start()
    assert waiting.wait(10)
    assert not done.wait(0.05)
    gate.computed(Batch("m", [pending(lane=Priority.HIGH)], 0.0, lane=Priority.HIGH))
    assert done.wait(10)
    assert gate.remaining_s(compute=True) == 0
    assert gate.remaining_s() > 0  # admission and publishing still wait
    gate.left(2)
    assert gate.remaining_s() == 0


def test_a_computed_low_batch_releases_nothing() -> None:
    gate = YieldToHigh(0.1, clock=Clock(), max_hold_s=3600)
    gate.arrived(1, computing=1)
    gate.computed(Batch("m", [pending(lane=Priority.LOW)], 0.0, lane=Priority.LOW))
    assert gate.remaining_s(compute=True) > 0


async def test_a_waiting_bulk_step_on_the_loop_goes_when_the_high_result_leaves() -> None:
    gate = YieldToHigh(0.1, clock=Clock(), max_hold_s=3600)
    gate.arrived(1)
    step = asyncio.create_task(gate.held())
    await asyncio.sleep(0)  # let it start waiting
    assert not step.done()
    gate.left(1)
    await asyncio.wait_for(step, 10)
