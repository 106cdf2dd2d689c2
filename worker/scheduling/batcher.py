"""The batcher: pure policy over the lanes and a clock reading; returns a batch plan.

A batch holds one model. It closes when it is full, when its oldest item has waited
``max_wait``, or at once when the device is idle (an idle device never waits for a
batch to fill). Lanes are served in strict priority: while a higher lane's batch is
filling, nothing lower jumps the queue, except a lane that ``LaneShares`` says is owed
its share of batches (so no lane starves). Within a lane, a model already on the
device goes before an older request for one that is not, for at most ``patience_s``
(model swaps are costly). Every plan first sweeps the lanes for items whose deadline
has passed: they leave with the plan's ``expired``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from consumers.contract import Priority
from worker.base.pending import Batch, Pending
from worker.scheduling.lanes import LANE_ORDER, CostBudget, Lane, Lanes
from worker.scheduling.shares import LaneShares
from worker.settings import BatchConfig


@dataclass(slots=True)
class BatchPlan:
    batch: Batch | None = None
    expired: list[Pending] = field(default_factory=list)
    wake_at_s: float | None = None  # when to plan again if nothing arrives meanwhile


class Batcher:
    def __init__(
        self,
        lanes: Lanes,
        config: BatchConfig,
        *,
        limit: Callable[[str, Priority], int],
        grouped: Callable[[str], bool],
        max_cost: Callable[[str], int | None] = lambda _: None,
        shares: LaneShares | None = None,
        resident: Callable[[str], bool] = lambda _: True,
        riders: bool = True,
    ) -> None:
        """``config``: its ``max_wait_ms`` and ``swap_patience_ms``."""
        self._lanes = lanes
        self._max_wait_s = config.max_wait_s
        self._limit = limit  # batch size cap per model and lane (the controller moves it)
        self._grouped = grouped  # whether a model's inputs vary in length
        self._max_cost = max_cost  # padded size cap per model (tokens, items)
        self._shares = shares
        self._resident = resident  # whether a model is on the device
        self._patience_s = config.swap_patience_s
        self._riders = riders  # whether lower lanes' items fill a batch's room

    def plan(
        self,
        now_s: float,
        *,
        idle: Collection[Priority],
        lanes: Collection[Priority] = LANE_ORDER,
    ) -> BatchPlan:
        """Expire what has waited past its deadline and form the next batch from one of
        ``lanes`` (those the executor has room for), if one is ready. A lane in ``idle``
        (its compute has nothing to run) does not wait ``max_wait`` for more items."""
        expired = self._lanes.expire(now_s)
        plan = self._form(now_s, idle, lanes)
        plan.expired[:0] = expired
        plan.wake_at_s = _earliest(plan.wake_at_s, self._lanes.next_deadline_s())
        return plan

    def sweep(self, now_s: float) -> BatchPlan:
        """Expire what has waited past its deadline, form nothing (the executor is full)."""
        expired = self._lanes.expire(now_s)
        return BatchPlan(expired=expired, wake_at_s=self._lanes.next_deadline_s())

    def _form(
        self, now_s: float, idle: Collection[Priority], open_lanes: Collection[Priority]
    ) -> BatchPlan:
        lanes = list(self._lanes)
        waiting = [
            (rank, lane, head)
            for rank, lane in enumerate(lanes)
            if lane.priority in open_lanes
            and (
                head := lane.next_head(now_s, resident=self._resident, patience_s=self._patience_s)
            )
        ]
        if not waiting:
            return BatchPlan()

        def ready(lane: Lane, head: Pending) -> bool:
            full = lane.count(head.model) >= self._limit(head.model, lane.priority)
            return lane.priority in idle or full or now_s >= head.received_s + self._max_wait_s

        chosen = waiting[0]
        shares = self._shares if len(waiting) > 1 else None  # only under contention
        if shares is not None:
            owed = shares.owed(w[1].priority for w in waiting if ready(w[1], w[2]))
            chosen = next((w for w in waiting if w[1].priority == owed), chosen)
        rank, lane, head = chosen
        if not ready(lane, head):
            return BatchPlan(wake_at_s=head.received_s + self._max_wait_s)
        if shares is not None:
            shares.served(lane.priority)
        model, limit = head.model, self._limit(head.model, lane.priority)
        # Caps of the lanes below, read before this take empties a higher lane.
        lower_lanes = lanes[rank + 1 :] if self._riders else []
        riders = [(lower, self._limit(model, lower.priority)) for lower in lower_lanes]
        grouped, budget = self._grouped(model), CostBudget(self._max_cost(model))
        items = lane.take(model, limit, group_by_cost=grouped, budget=budget)
        # Room left: same-model requests from lower lanes ride along for free, within
        # their own lane's cap (a sliced lane's riders do not lengthen the batch).
        for lower, cap in riders:
            room = min(limit, cap) - len(items)
            items += lower.take(model, room, group_by_cost=grouped, budget=budget)
        return _split_expired(model, items, now_s, lane.priority)


def _earliest(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


def _split_expired(model: str, items: list[Pending], now_s: float, lane: Priority) -> BatchPlan:
    live = [p for p in items if p.deadline_s is None or p.deadline_s > now_s]
    expired = [p for p in items if p.deadline_s is not None and p.deadline_s <= now_s]
    if not live:
        return BatchPlan(expired=expired, wake_at_s=now_s)
    return BatchPlan(Batch(model, live, now_s, lane=lane), expired)
