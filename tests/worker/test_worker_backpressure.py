"""Backpressure: full lanes pause their topic; the in-flight budget (records and bytes)
pauses bulk topics first and the high topic at its end; the bulk topics are polled
slowly while a bulk lane is behind or all of them are paused."""

from __future__ import annotations

from pipeline_factories import pending, record

from consumers.contract import Priority
from worker.intake.backpressure import BEHIND_AFTER_S, bulk_fetches_slow, bulk_room, paused_topics
from worker.intake.inflight import InFlight
from worker.scheduling.lanes import Lanes

TOPICS = {"t.high": Priority.HIGH, "t.normal": Priority.NORMAL, "t.low": Priority.LOW}


def paused(lanes: Lanes, load: float) -> set[str]:
    return paused_topics(TOPICS, lanes, load=load, high_reserve=0.1)


def test_nothing_paused_with_room_everywhere() -> None:
    lanes = Lanes(capacity=2)
    lanes.push(pending(lane=Priority.LOW))
    assert paused(lanes, 0.1) == set()


def test_a_full_lane_pauses_only_its_topic() -> None:
    lanes = Lanes(capacity=2)
    for _ in range(2):
        lanes.push(pending(lane=Priority.LOW))
    assert paused(lanes, 0.2) == {"t.low"}


def test_the_reserve_keeps_the_high_topic_open_after_bulk_pauses() -> None:
    lanes = Lanes(capacity=100)
    assert paused(lanes, 0.9) == {"t.normal", "t.low"}


def test_a_spent_budget_pauses_the_high_topic_too() -> None:
    # An outage must hold a bounded amount whatever lane the traffic comes on.
    assert paused(Lanes(capacity=100), 1.0) == set(TOPICS)


def test_a_full_high_lane_pauses_the_high_topic() -> None:
    lanes = Lanes(capacity=1)
    lanes.push(pending(lane=Priority.HIGH))
    assert "t.high" in paused(lanes, 0.0)


def test_single_lane_mode_has_no_reserve() -> None:
    lanes = Lanes(capacity=100, single_lane=True)
    assert paused(lanes, 0.95) == set()
    assert paused(lanes, 1.0) == set(TOPICS)


def test_the_budget_counts_bytes_as_well_as_records() -> None:
    budget = InFlight(max_records=1000, max_bytes=10_000)
    few_large = [record(b"x" * 4000, partition=0), record(b"y" * 4000, partition=1)]
    budget.add(few_large)
    assert len(budget) == 2 and budget.bytes == 8000
    assert budget.load == 0.8  # bytes, not the 0.2% of records, set the load
    assert budget.count_in({("inferlane.requests", 1)}) == 1
    budget.remove(few_large[:1])
    assert budget.load == 0.4 and budget.count_in({("inferlane.requests", 0)}) == 0


def test_a_bulk_fetch_is_bounded_so_it_cannot_spend_the_high_reserve() -> None:
    budget = InFlight(max_records=1000, max_bytes=10**9)
    budget.add([record(b"x", partition=0)] * 880)
    room = bulk_room(budget, high_reserve=0.1, single_lane=False)
    assert room == 20  # up to 900 records: the bulk share, never into the reserve
    budget.add([record(b"x", partition=0)] * room)
    assert paused(Lanes(capacity=10_000), budget.load) == {"t.normal", "t.low"}
    assert bulk_room(budget, high_reserve=0.1, single_lane=False) == 0
    assert bulk_room(budget, high_reserve=0.1, single_lane=True) == 100  # no reserve


def slow(lanes: Lanes, paused: set[str], now_s: float) -> bool:
    return bulk_fetches_slow(TOPICS, lanes, paused, now_s=now_s)


def test_bulk_fetches_slow_down_only_once_a_bulk_lane_stays_behind() -> None:
    lanes = Lanes(capacity=100)
    assert not slow(lanes, set(), 50.0)
    lanes.push(pending(lane=Priority.LOW, received_s=10.0))
    lanes.push(pending(lane=Priority.LOW, received_s=10.9))
    assert not slow(lanes, set(), 10.0 + BEHIND_AFTER_S / 2)
    assert slow(lanes, set(), 10.0 + BEHIND_AFTER_S)  # counted from the first item
    lanes.lane_for(Priority.LOW).take("m", 2)
    assert not slow(lanes, set(), 20.0)  # emptied: on time again
    lanes.push(pending(lane=Priority.HIGH, received_s=0.0))
    assert not slow(lanes, set(), 20.0)  # the high lane has its own reader


def test_bulk_fetches_slow_down_while_every_bulk_topic_is_paused() -> None:
    lanes = Lanes(capacity=100)
    assert slow(lanes, {"t.normal", "t.low"}, 0.0)
    assert not slow(lanes, {"t.low"}, 0.0)
