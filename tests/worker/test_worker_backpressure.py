"""Backpressure: full lanes pause their topic; the global cap never pauses the high topic."""

from __future__ import annotations

from pipeline_factories import pending

from consumers.contract import Priority
from worker.backpressure import paused_topics
from worker.lanes import Lanes

TOPICS = {"t.high": Priority.HIGH, "t.normal": Priority.NORMAL, "t.low": Priority.LOW}


def test_nothing_paused_with_room_everywhere() -> None:
    lanes = Lanes(capacity=2)
    lanes.push(pending(lane=Priority.LOW))
    assert paused_topics(TOPICS, lanes, in_flight=1, max_in_flight=10) == set()


def test_a_full_lane_pauses_only_its_topic() -> None:
    lanes = Lanes(capacity=2)
    for _ in range(2):
        lanes.push(pending(lane=Priority.LOW))
    assert paused_topics(TOPICS, lanes, in_flight=2, max_in_flight=10) == {"t.low"}


def test_the_global_cap_holds_back_bulk_but_not_the_high_topic() -> None:
    lanes = Lanes(capacity=100)
    assert paused_topics(TOPICS, lanes, in_flight=10, max_in_flight=10) == {"t.normal", "t.low"}


def test_a_full_high_lane_pauses_the_high_topic_too() -> None:
    lanes = Lanes(capacity=1)
    lanes.push(pending(lane=Priority.HIGH))
    assert "t.high" in paused_topics(TOPICS, lanes, in_flight=10, max_in_flight=10)


def test_single_lane_mode_has_no_exemption() -> None:
    lanes = Lanes(capacity=100, single_lane=True)
    assert paused_topics(TOPICS, lanes, in_flight=10, max_in_flight=10) == set(TOPICS)
