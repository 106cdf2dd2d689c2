"""Which lane topics to pause: Kafka keeps their records while the worker catches up."""

from __future__ import annotations

from consumers.contract import Priority
from worker.lanes import Lanes


def paused_topics(
    lane_of_topic: dict[str, Priority], lanes: Lanes, *, load: float, high_reserve: float
) -> set[str]:
    """A topic pauses when its lane is full, or when the in-flight budget is spent.

    ``load`` is the share of the in-flight budget in use (records or bytes). Bulk
    topics pause once it reaches ``1 - high_reserve``; the high topic keeps that reserve
    for itself and pauses only at the full budget, so an urgent request does not wait
    for a backlog to drain, and an outage still holds a bounded amount. Single-lane mode
    has no priorities, hence no reserve.
    """
    bulk_limit = 1.0 if lanes.single_lane else 1.0 - high_reserve
    paused = set()
    for topic, lane in lane_of_topic.items():
        limit = 1.0 if lane == Priority.HIGH else bulk_limit
        if lanes.lane_for(lane).full or load >= limit:
            paused.add(topic)
    return paused
