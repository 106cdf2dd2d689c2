"""The batcher: pure policy over the lanes and a clock reading; returns a batch plan.

A batch holds one model. It closes when it is full, when its oldest item has waited
``max_wait``, or at once when the device is idle (an idle device never waits for a
batch to fill). Lanes are served in strict priority: while a higher lane's batch is
filling, nothing lower jumps the queue.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from worker.lanes import Lanes
from worker.pending import Batch, Pending


@dataclass(slots=True)
class BatchPlan:
    batch: Batch | None = None
    expired: list[Pending] = field(default_factory=list)
    wake_at_s: float | None = None  # when to plan again if nothing arrives meanwhile


class Batcher:
    def __init__(
        self,
        lanes: Lanes,
        *,
        max_wait_s: float,
        limit: Callable[[str], int],
        grouped: Callable[[str], bool],
    ) -> None:
        self._lanes = lanes
        self._max_wait_s = max_wait_s
        self._limit = limit  # batch size cap per model (the controller moves it)
        self._grouped = grouped  # whether a model's inputs vary in length

    def plan(self, now_s: float, *, device_idle: bool) -> BatchPlan:
        lanes = list(self._lanes)
        for rank, lane in enumerate(lanes):
            head = lane.oldest()
            if head is None:
                continue
            model, limit = head.model, self._limit(head.model)
            close_at = head.received_s + self._max_wait_s
            if not (device_idle or now_s >= close_at or lane.count(model) >= limit):
                return BatchPlan(wake_at_s=close_at)
            grouped = self._grouped(model)
            items = lane.take(model, limit, group_by_cost=grouped)
            # Room left: same-model requests from lower lanes ride along for free.
            for lower in lanes[rank + 1 :]:
                items += lower.take(model, limit - len(items), group_by_cost=grouped)
            return _split_expired(model, items, now_s)
        return BatchPlan()


def _split_expired(model: str, items: list[Pending], now_s: float) -> BatchPlan:
    live = [p for p in items if p.deadline_s is None or p.deadline_s > now_s]
    expired = [p for p in items if p.deadline_s is not None and p.deadline_s <= now_s]
    if not live:
        return BatchPlan(expired=expired, wake_at_s=now_s)
    return BatchPlan(Batch(model, live, now_s), expired)
