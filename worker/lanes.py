"""Priority lanes: bounded FIFO queues, one per priority, grouped by model inside.

Pure bookkeeping, no I/O and no clock: the batcher reads and takes from them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator

from consumers.contract import Priority
from worker.pending import Pending

LANE_ORDER = (Priority.HIGH, Priority.NORMAL, Priority.LOW)

# How many batches deep grouping by cost looks: deep enough that a batch of text spans
# a narrow band of lengths (minilm ran ~1.4x faster sorted than in arrival order), while
# the oldest item always rides in the batch taken, so nothing waits behind its cost.
COST_LOOKAHEAD_BATCHES = 16


class Lane:
    """Requests of one priority; per model a FIFO, so a batch never mixes models."""

    def __init__(self, priority: Priority, capacity: int) -> None:
        self.priority = priority
        self.capacity = capacity
        self._by_model: dict[str, deque[Pending]] = {}
        self._size = 0

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
        self._size += 1

    def oldest(self) -> Pending | None:
        """The head that has waited longest, across models."""
        heads = (q[0] for q in self._by_model.values() if q)
        return min(heads, key=lambda p: p.received_s, default=None)

    def count(self, model: str) -> int:
        queue = self._by_model.get(model)
        return len(queue) if queue else 0

    def take(self, model: str, limit: int, *, group_by_cost: bool = False) -> list[Pending]:
        """Up to ``limit`` items of ``model``: the oldest first, or, for variable-length
        inputs, the oldest plus those closest to it in cost (less padding)."""
        queue = self._by_model.get(model)
        if not queue or limit <= 0:
            return []
        if group_by_cost and len(queue) > limit:
            taken = _take_similar(queue, limit)
        else:
            taken = [queue.popleft() for _ in range(min(limit, len(queue)))]
        if not queue:
            del self._by_model[model]
        self._size -= len(taken)
        return taken

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
        self._size -= len(removed)
        return removed


def _take_similar(queue: deque[Pending], limit: int) -> list[Pending]:
    window = min(len(queue), limit * COST_LOOKAHEAD_BATCHES)
    candidates = [queue.popleft() for _ in range(window)]
    head_cost = candidates[0].cost
    ranked = sorted(range(1, window), key=lambda i: abs(candidates[i].cost - head_cost))
    chosen = {0, *ranked[: limit - 1]}
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

    def remove_if(self, doomed: Callable[[Pending], bool]) -> list[Pending]:
        """Take out queued items (a revoked partition's): their new owner replays them."""
        return [p for lane in self._lanes.values() for p in lane.remove_if(doomed)]
