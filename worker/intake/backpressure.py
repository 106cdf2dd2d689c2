"""Which lane topics to pause, and when to poll them slowly: Kafka keeps their records
while the worker catches up."""

from __future__ import annotations

import math

from consumers.contract import Priority
from worker.intake.inflight import InFlight
from worker.scheduling.lanes import Lanes

# A bulk lane that has not been empty for this long is behind: a record fetched sooner
# would only queue longer.
BEHIND_AFTER_S = 1.0


def bulk_limit(*, high_reserve: float, single_lane: bool) -> float:
    """The share of the in-flight budget the bulk topics may fill; the rest is the high
    topic's reserve. Single-lane mode has no priorities, hence no reserve."""
    return 1.0 if single_lane else 1.0 - high_reserve


def bulk_room(in_flight: InFlight, *, high_reserve: float, single_lane: bool) -> int:
    """How many records one bulk fetch may take without crossing the bulk share.

    Pausing alone acts after a fetch: a fetch of ``fetch_max_records`` taken just below
    the bulk share would overshoot into the reserve and pause the high topic too, until
    the backlog drained back below the full budget. In records only: a fetch's bytes are
    known only once it is taken.
    """
    share = bulk_limit(high_reserve=high_reserve, single_lane=single_lane)
    return math.ceil(share * in_flight.max_records) - len(in_flight)


def paused_topics(
    lane_of_topic: dict[str, Priority], lanes: Lanes, *, load: float, high_reserve: float
) -> set[str]:
    """A topic pauses when its lane is full, or when the in-flight budget is spent.

    ``load`` is the share of the in-flight budget in use (records or bytes). Bulk
    topics pause once it reaches ``1 - high_reserve``; the high topic keeps that reserve
    for itself and pauses only at the full budget, so an urgent request does not wait
    for a backlog to drain, and an outage still holds a bounded amount.
    """
    bulk = bulk_limit(high_reserve=high_reserve, single_lane=lanes.single_lane)
    paused = set()
    for topic, lane in lane_of_topic.items():
        limit = 1.0 if lane == Priority.HIGH else bulk
        if lanes.lane_for(lane).full or load >= limit:
            paused.add(topic)
    return paused


def bulk_fetches_slow(
    lane_of_topic: dict[str, Priority], lanes: Lanes, paused: set[str], *, now_s: float
) -> bool:
    """Whether the bulk topics' consumer may poll slowly: every bulk topic is paused (it
    could bring nothing the worker would take), or a bulk lane is behind."""
    bulk = {topic for topic, lane in lane_of_topic.items() if lane != Priority.HIGH}
    if bulk <= paused:
        return True
    since = (lanes.lane_for(lane).waiting_since_s for lane in (Priority.NORMAL, Priority.LOW))
    return any(s is not None and now_s - s >= BEHIND_AFTER_S for s in since)
