"""Which lane topics to pause: Kafka keeps their records while the worker catches up."""

from __future__ import annotations

from consumers.contract import Priority
from worker.lanes import Lanes


def paused_topics(
    lane_of_topic: dict[str, Priority], lanes: Lanes, *, in_flight: int, max_in_flight: int
) -> set[str]:
    """A topic pauses when its lane is full, or when too much is in flight overall.

    The global cap holds back bulk traffic, never the high topic (unless in single-lane
    mode, which has no priorities): the high lane's own capacity bounds it, so an urgent
    request never waits for a backlog to drain.
    """
    over = in_flight >= max_in_flight
    exempt = None if lanes.single_lane else Priority.HIGH
    return {
        topic
        for topic, lane in lane_of_topic.items()
        if lanes.lane_for(lane).full or (over and lane != exempt)
    }
