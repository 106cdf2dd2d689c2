"""Lane shares and deadlines while waiting: pure, through the real Lanes and Batcher."""

from __future__ import annotations

from collections import Counter

import pytest
from pipeline_factories import pending

from consumers.contract import Priority
from worker.scheduling.batcher import Batcher
from worker.scheduling.lanes import CostBudget, Lane, Lanes
from worker.scheduling.shares import LaneShares
from worker.settings import BatchConfig

HIGH, NORMAL, LOW = Priority.HIGH, Priority.NORMAL, Priority.LOW
SHARES = {HIGH: 0.70, NORMAL: 0.25, LOW: 0.05}


def backlogged_batcher(limit: int = 4) -> tuple[Lanes, Batcher]:
    lanes = Lanes(capacity=100_000)
    batcher = Batcher(
        lanes,
        BatchConfig(max_wait_ms=10, swap_patience_ms=0),
        limit=lambda *_: limit,
        grouped=lambda _: False,
        shares=LaneShares(SHARES, window=100),
    )
    return lanes, batcher


def test_owed_lanes_get_their_share_in_proportion() -> None:
    shares = LaneShares(SHARES, window=100)
    served: Counter[Priority] = Counter()
    for _ in range(1000):
        lane = shares.owed([HIGH, NORMAL, LOW]) or HIGH
        shares.served(lane)
        served[lane] += 1
    assert served[HIGH] == pytest.approx(700, abs=15)
    assert served[NORMAL] == pytest.approx(250, abs=15)
    assert served[LOW] == pytest.approx(50, abs=10)


def test_no_lane_is_owed_when_it_is_not_ready() -> None:
    shares = LaneShares(SHARES, window=100)
    assert shares.owed([]) is None
    for _ in range(10):
        shares.served(HIGH)
    assert shares.owed([HIGH]) is None  # high alone, above its share: strict priority


@pytest.mark.parametrize("backlogged", [(HIGH, NORMAL, LOW), (HIGH, LOW), (NORMAL, LOW)])
def test_with_every_lane_backlogged_each_gets_at_least_its_share(
    backlogged: tuple[Priority, ...],
) -> None:
    lanes, batcher = backlogged_batcher()
    for lane in backlogged:
        for _ in range(2000):
            lanes.push(pending(lane=lane, received_s=0.0))
    served: Counter[Priority] = Counter()
    for _ in range(400):
        plan = batcher.plan(1.0, idle=())
        assert plan.batch is not None
        served[plan.batch.items[0].lane] += 1
    for lane in backlogged:
        assert served[lane] >= SHARES[lane] * 400 - 2, served
    assert served[backlogged[0]] == max(served.values())  # priority still leads


def test_a_starved_lane_expires_its_waiting_items_within_one_plan() -> None:
    lanes, batcher = backlogged_batcher(limit=4)
    for _ in range(1000):
        lanes.push(pending(lane=HIGH, received_s=0.0))
    doomed = [pending(lane=LOW, received_s=0.0, deadline_s=0.5) for _ in range(3)]
    kept = pending(lane=LOW, received_s=0.0, deadline_s=9.0)
    for p in [doomed[0], kept, *doomed[1:]]:
        lanes.push(p)

    plan = batcher.plan(0.4, idle=())
    assert plan.expired == [] and plan.wake_at_s == 0.5  # wakes for the first deadline

    plan = batcher.plan(0.5, idle=())

    assert plan.expired == doomed
    assert plan.batch is not None and plan.batch.items[0].lane == HIGH
    assert lanes.lane_for(LOW).count("m") == 1


def test_sweep_expires_while_the_executor_is_full_and_forms_nothing() -> None:
    lanes, batcher = backlogged_batcher()
    dead = pending(lane=NORMAL, received_s=0.0, deadline_s=1.0)
    live = pending(lane=NORMAL, received_s=0.0, deadline_s=2.0)
    lanes.push(dead)
    lanes.push(live)
    plan = batcher.sweep(1.5)
    assert plan.batch is None and plan.expired == [dead]
    assert plan.wake_at_s == 2.0 and len(lanes) == 1


def test_taken_items_leave_the_deadline_heap_and_it_stays_bounded() -> None:
    lane = Lane(LOW, capacity=100_000)
    for i in range(10_000):
        lane.push(pending(lane=LOW, received_s=0.0, deadline_s=100.0 + i))
        lane.take("m", 1)
    assert lane.expire(1e9) == []  # all were taken before their deadline
    assert len(lane._deadlines) <= 64 + 2  # stale entries were compacted away
    assert lane.next_deadline_s() is None


def test_a_cost_budget_caps_the_padded_size_of_a_batch() -> None:
    lane = Lane(NORMAL, capacity=100)
    for cost in (10, 10, 30, 10):
        lane.push(pending(cost=cost))
    taken = lane.take("m", 10, budget=CostBudget(40))
    assert [p.cost for p in taken] == [10, 10]  # a third would pad 3 x 30 = 90 > 40
    wide = lane.take("m", 10, budget=CostBudget(5))
    assert [p.cost for p in wide] == [30]  # one item always fits, whatever its cost


def test_grouped_takes_respect_the_budget_too() -> None:
    lane = Lane(NORMAL, capacity=100)
    for cost in (10, 12, 50, 11, 9):
        lane.push(pending(cost=cost))
    taken = lane.take("m", 2, group_by_cost=True, budget=CostBudget(24))
    assert [p.cost for p in taken] == [10, 11]
    assert len(lane) == 3
