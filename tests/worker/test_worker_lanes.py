"""Lanes: bounded priority FIFOs grouped by model; pure bookkeeping."""

from __future__ import annotations

import pytest
from pipeline_factories import pending

from consumers.contract import Priority
from worker.scheduling.lanes import COST_LOOKAHEAD_BATCHES, LANE_ORDER, Lane, Lanes


def ids(items: list) -> list[str]:
    return [p.request.request_id for p in items]


def test_lanes_iterate_in_service_order_high_first() -> None:
    lanes = Lanes(capacity=4)
    assert [lane.priority for lane in lanes] == [Priority.HIGH, Priority.NORMAL, Priority.LOW]
    assert LANE_ORDER == (Priority.HIGH, Priority.NORMAL, Priority.LOW)


def test_push_routes_by_the_items_lane() -> None:
    lanes = Lanes(capacity=4)
    lanes.push(pending(lane=Priority.LOW))
    lanes.push(pending(lane=Priority.HIGH))
    lanes.push(pending(lane=Priority.HIGH))
    assert [len(lane) for lane in lanes] == [2, 0, 1]
    assert len(lanes) == 3


def test_single_lane_folds_every_priority_into_the_normal_lane() -> None:
    lanes = Lanes(capacity=8, single_lane=True)
    items = [pending(lane=p, received_s=i) for i, p in enumerate(LANE_ORDER)]
    for item in items:
        lanes.push(item)
    assert [len(lane) for lane in lanes] == [0, 3, 0]
    assert lanes.lane_for(Priority.HIGH) is lanes.lane_for(Priority.LOW)
    taken = lanes.lane_for(Priority.NORMAL).take("m", 10)
    assert taken == items  # one FIFO: arrival order, priority ignored
    assert taken[0].lane is Priority.HIGH  # the item keeps its own priority for the result


def test_each_model_is_a_fifo_of_its_own() -> None:
    lane = Lane(Priority.NORMAL, capacity=10)
    a = [pending("a", request_id=f"a{i}", received_s=i) for i in range(3)]
    b = [pending("b", request_id=f"b{i}", received_s=10 + i) for i in range(2)]
    for item in [a[0], b[0], a[1], b[1], a[2]]:
        lane.push(item)

    assert (lane.count("a"), lane.count("b"), lane.count("c")) == (3, 2, 0)
    assert ids(lane.take("a", 2)) == ["a0", "a1"]
    assert ids(lane.take("b", 5)) == ["b0", "b1"]
    assert ids(lane.take("a", 5)) == ["a2"]
    assert len(lane) == 0
    assert lane.take("a", 5) == []


def test_oldest_is_the_longest_waiting_head_across_models() -> None:
    lane = Lane(Priority.NORMAL, capacity=10)
    assert lane.oldest() is None
    lane.push(pending("a", received_s=5.0))
    early_b = pending("b", received_s=2.0)
    lane.push(early_b)
    lane.push(pending("a", received_s=1.0))  # older, but behind a's head
    assert lane.oldest() is early_b


def test_full_at_capacity_and_not_before() -> None:
    lane = Lane(Priority.HIGH, capacity=2)
    lane.push(pending())
    assert not lane.full
    lane.push(pending())
    assert lane.full
    lane.take("m", 1)
    assert not lane.full


def test_a_nonpositive_limit_takes_nothing() -> None:
    lane = Lane(Priority.NORMAL, capacity=4)
    lane.push(pending())
    assert lane.take("m", 0) == []
    assert len(lane) == 1


def test_grouping_by_cost_takes_the_head_and_the_closest_costs_in_arrival_order() -> None:
    lane = Lane(Priority.NORMAL, capacity=20)
    costs = [10, 50, 11, 49, 12, 9]
    items = [pending(cost=c, request_id=f"c{c}", received_s=i) for i, c in enumerate(costs)]
    for item in items:
        lane.push(item)

    taken = lane.take("m", 3, group_by_cost=True)

    assert [p.cost for p in taken] == [10, 11, 9]  # head, then ties by arrival
    assert len(lane) == 3
    assert [p.cost for p in lane.take("m", 10)] == [50, 49, 12]  # arrival order kept


def test_grouping_by_cost_always_takes_the_head_even_when_it_is_the_outlier() -> None:
    lane = Lane(Priority.NORMAL, capacity=20)
    for i, c in enumerate([100, 5, 5, 5, 5]):
        lane.push(pending(cost=c, received_s=i))
    taken = lane.take("m", 2, group_by_cost=True)
    assert [p.cost for p in taken] == [100, 5]
    assert [p.received_s for p in taken] == [0, 1]


def test_grouping_by_cost_looks_only_a_few_batches_deep() -> None:
    lane = Lane(Priority.NORMAL, capacity=100)
    deep = 2 * COST_LOOKAHEAD_BATCHES
    costs = [1] + [100] * deep + [1]  # the twin of the head sits past the lookahead
    for i, c in enumerate(costs):
        lane.push(pending(cost=c, received_s=i))
    taken = lane.take("m", 2, group_by_cost=True)
    assert [p.received_s for p in taken] == [0, 1]


def test_grouping_when_everything_fits_is_plain_fifo() -> None:
    lane = Lane(Priority.NORMAL, capacity=10)
    for i, c in enumerate([30, 1, 20]):
        lane.push(pending(cost=c, received_s=i))
    assert [p.cost for p in lane.take("m", 3, group_by_cost=True)] == [30, 1, 20]


def test_remove_if_takes_out_matching_items_across_lanes_and_keeps_order() -> None:
    lanes = Lanes(capacity=10)
    keep = [
        pending("a", lane=Priority.HIGH, request_id="k1"),
        pending("b", lane=Priority.LOW, request_id="k2"),
        pending("a", lane=Priority.HIGH, request_id="k3"),
    ]
    doomed = [
        pending("a", lane=Priority.HIGH, request_id="d1"),
        pending("b", lane=Priority.LOW, request_id="d2"),
    ]
    for item in [keep[0], doomed[0], keep[1], doomed[1], keep[2]]:
        lanes.push(item)

    removed = lanes.remove_if(lambda p: p.request.request_id.startswith("d"))

    assert sorted(ids(removed)) == ["d1", "d2"]
    assert len(lanes) == 3
    high = lanes.lane_for(Priority.HIGH)
    assert ids(high.take("a", 10)) == ["k1", "k3"]
    low = lanes.lane_for(Priority.LOW)
    assert low.count("b") == 1


def test_remove_if_empties_a_model_queue_completely() -> None:
    lane = Lane(Priority.NORMAL, capacity=4)
    lane.push(pending("a"))
    assert len(lane.remove_if(lambda p: True)) == 1
    assert len(lane) == 0 and lane.oldest() is None and lane.count("a") == 0


def test_a_lane_knows_since_when_it_has_not_been_empty() -> None:
    lane = Lane(Priority.NORMAL, capacity=10)
    assert lane.waiting_since_s is None
    lane.push(pending("a", received_s=5.0))
    lane.push(pending("b", received_s=6.0))
    assert lane.waiting_since_s == 5.0
    lane.take("a", 1)
    assert lane.waiting_since_s == 5.0  # never empty since
    lane.take("b", 1)
    assert lane.waiting_since_s is None
    lane.push(pending("a", received_s=8.0, deadline_s=9.0))
    assert lane.waiting_since_s == 8.0
    assert len(lane.expire(9.0)) == 1 and lane.waiting_since_s is None
    lane.push(pending("a", received_s=10.0))
    lane.remove_if(lambda p: True)
    assert lane.waiting_since_s is None


@pytest.mark.parametrize("limit", [1, 2, 3, 7])
def test_take_never_returns_more_than_the_limit(limit: int) -> None:
    lane = Lane(Priority.NORMAL, capacity=100)
    for i in range(20):
        lane.push(pending(cost=i % 5, received_s=i))
    for grouped in (False, True):
        taken = lane.take("m", limit, group_by_cost=grouped)
        assert len(taken) == limit
    assert len(lane) == 20 - 2 * limit
