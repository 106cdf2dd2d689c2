"""Priority lanes: bounded FIFO queues, one per priority, grouped by model inside.

Pure bookkeeping, no I/O and no clock: the batcher reads and takes from them. Each
lane keeps a heap of its waiting items' deadlines, so a sweep finds the expired ones
without scanning the queues.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable, Iterator

from consumers.contract import Priority
from worker.base.pending import Batch, Pending

LANE_ORDER = (Priority.HIGH, Priority.NORMAL, Priority.LOW)

# How many batches deep grouping by cost looks: deep enough that a batch of text spans
# a narrow band of lengths (minilm ran ~1.4x faster sorted than in arrival order; 16
# batches deep left ~3% more padding than 64), while the oldest item always rides in the
# batch taken, so nothing waits behind its cost.
COST_LOOKAHEAD_BATCHES = 64

_tie = itertools.count()  # heap tie-break: never compare two Pending


def lane_of(batch: Batch) -> Priority:
    """The lane a batch serves: the one it was formed from, else its highest item's
    (lower-lane items may ride along)."""
    if batch.lane is not None:
        return batch.lane
    lanes = {p.lane for p in batch.items}
    return next((lane for lane in LANE_ORDER if lane in lanes), LANE_ORDER[-1])


class CostBudget:
    """Caps a batch by padded size: items x the largest item cost (tokens for text)."""

    def __init__(self, max_cost: int | None, items: int = 0, widest: int = 0) -> None:
        self.max_cost = max_cost
        self.items = items
        self.widest = widest

    def fits(self, cost: int) -> bool:
        if self.max_cost is None or self.items == 0:
            return True  # a batch always holds at least one item
        return (self.items + 1) * max(self.widest, cost) <= self.max_cost

    def add(self, cost: int) -> None:
        self.items += 1
        self.widest = max(self.widest, cost)


class Lane:
    """Requests of one priority; per model a FIFO, so a batch never mixes models."""

    def __init__(self, priority: Priority, capacity: int) -> None:
        self.priority = priority
        self.capacity = capacity
        self._by_model: dict[str, deque[Pending]] = {}
        self._size = 0
        self._deadlines: list[tuple[float, int, Pending]] = []
        self._timed: set[int] = set()  # ids of waiting items that have a deadline
        # Receipt of the item that found the lane empty (None: empty now): a lane that
        # has not been empty for long is behind, whatever its depth.
        self.waiting_since_s: float | None = None

    def __len__(self) -> int:
        return self._size

    @property
    def full(self) -> bool:
        return self._size >= self.capacity

    def push(self, item: Pending) -> None:
        queue = self._by_model.get(item.model)
        if queue is None:
            queue = self._by_model[item.model] = deque()
        queue.append(item)
        if not self._size:
            self.waiting_since_s = item.received_s
        self._size += 1
        if item.deadline_s is not None:
            heapq.heappush(self._deadlines, (item.deadline_s, next(_tie), item))
            self._timed.add(id(item))

    def oldest(self) -> Pending | None:
        """The head that has waited longest, across models."""
        heads = (q[0] for q in self._by_model.values() if q)
        return min(heads, key=lambda p: p.received_s, default=None)

    def next_head(
        self, now_s: float, *, resident: Callable[[str], bool], patience_s: float
    ) -> Pending | None:
        """The oldest head, unless its model is not ``resident`` (on the device) and has
        waited less than ``patience_s``: then the oldest head of a resident model."""
        oldest = self.oldest()
        if oldest is None or resident(oldest.model) or now_s - oldest.received_s >= patience_s:
            return oldest
        warm = (q[0] for m, q in self._by_model.items() if q and resident(m))
        return min(warm, key=lambda p: p.received_s, default=oldest)

    def count(self, model: str) -> int:
        queue = self._by_model.get(model)
        return len(queue) if queue else 0

    def take(
        self,
        model: str,
        limit: int,
        *,
        group_by_cost: bool = False,
        budget: CostBudget | None = None,
    ) -> list[Pending]:
        """Up to ``limit`` items of ``model`` within ``budget``: the oldest first, or, for
        variable-length inputs, the oldest plus those closest to it in cost (less
        padding)."""
        queue = self._by_model.get(model)
        if not queue or limit <= 0:
            return []
        budget = budget or CostBudget(None)
        if group_by_cost and len(queue) > limit:
            taken = _take_similar(queue, limit, budget)
        else:
            taken = []
            while queue and len(taken) < limit and budget.fits(queue[0].cost):
                budget.add(queue[0].cost)
                taken.append(queue.popleft())
        if not queue:
            del self._by_model[model]
        self._forget(taken)
        return taken

    def expire(self, now_s: float) -> list[Pending]:
        """Take out every waiting item whose deadline is at or before ``now_s``."""
        doomed: list[Pending] = []
        while self._deadlines and self._deadlines[0][0] <= now_s:
            item = heapq.heappop(self._deadlines)[2]
            if id(item) in self._timed:
                doomed.append(item)
        if doomed:
            gone = {id(p) for p in doomed}
            for model in {p.model for p in doomed}:
                kept = deque(p for p in self._by_model[model] if id(p) not in gone)
                if kept:
                    self._by_model[model] = kept
                else:
                    del self._by_model[model]
            self._forget(doomed)
        return doomed

    def next_deadline_s(self) -> float | None:
        while self._deadlines and id(self._deadlines[0][2]) not in self._timed:
            heapq.heappop(self._deadlines)  # taken meanwhile
        return self._deadlines[0][0] if self._deadlines else None

    def _forget(self, gone: list[Pending]) -> None:
        self._size -= len(gone)
        if not self._size:
            self.waiting_since_s = None
        for p in gone:
            self._timed.discard(id(p))
        # Entries of items taken before their deadline leave the heap lazily; rebuild it
        # when they outnumber the live ones, so memory follows what is waiting.
        if len(self._deadlines) > 2 * len(self._timed) + 64:
            self._deadlines = [e for e in self._deadlines if id(e[2]) in self._timed]
            heapq.heapify(self._deadlines)

    def remove_if(self, doomed: Callable[[Pending], bool]) -> list[Pending]:
        removed: list[Pending] = []
        for model in list(self._by_model):
            queue = self._by_model[model]
            kept = deque(p for p in queue if not doomed(p))
            removed.extend(p for p in queue if doomed(p))
            if kept:
                self._by_model[model] = kept
            else:
                del self._by_model[model]
        self._forget(removed)
        return removed


def _take_similar(queue: deque[Pending], limit: int, budget: CostBudget) -> list[Pending]:
    if not budget.fits(queue[0].cost):
        return []
    window = min(len(queue), limit * COST_LOOKAHEAD_BATCHES)
    candidates = [queue.popleft() for _ in range(window)]
    head_cost = candidates[0].cost
    ranked = sorted(range(1, window), key=lambda i: abs(candidates[i].cost - head_cost))
    chosen = {0}
    budget.add(head_cost)
    for i in ranked:
        if len(chosen) == limit or not budget.fits(candidates[i].cost):
            break
        budget.add(candidates[i].cost)
        chosen.add(i)
    # Keep arrival order for what stays behind.
    queue.extendleft(reversed([c for i, c in enumerate(candidates) if i not in chosen]))
    return [candidates[i] for i in sorted(chosen)]


class Lanes:
    """The high > normal > low set; ``single_lane`` folds everything into one FIFO."""

    def __init__(self, capacity: int, *, single_lane: bool = False) -> None:
        self.single_lane = single_lane
        self._lanes = {p: Lane(p, capacity) for p in LANE_ORDER}

    def lane_for(self, priority: Priority) -> Lane:
        return self._lanes[Priority.NORMAL if self.single_lane else priority]

    def push(self, item: Pending) -> None:
        self.lane_for(item.lane).push(item)

    def __iter__(self) -> Iterator[Lane]:
        """Lanes in service order, highest first."""
        return (self._lanes[p] for p in LANE_ORDER)

    def __len__(self) -> int:
        return sum(len(lane) for lane in self._lanes.values())

    def expire(self, now_s: float) -> list[Pending]:
        """Take out every waiting item, in any lane, whose deadline has passed."""
        return [p for lane in self._lanes.values() for p in lane.expire(now_s)]

    def next_deadline_s(self) -> float | None:
        deadlines = (lane.next_deadline_s() for lane in self._lanes.values())
        return min((d for d in deadlines if d is not None), default=None)

    def count(self, model: str) -> int:
        """Items of ``model`` waiting in every lane."""
        return sum(lane.count(model) for lane in self._lanes.values())

    def remove_if(self, doomed: Callable[[Pending], bool]) -> list[Pending]:
        """Take out queued items (a revoked partition's): their new owner replays them."""
        return [p for lane in self._lanes.values() for p in lane.remove_if(doomed)]
