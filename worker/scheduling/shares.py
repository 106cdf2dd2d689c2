"""Lane shares: no lane starves while higher ones stay backlogged (a pure decider).

Lanes are served in strict priority, except under contention (two or more lanes with
waiting items): then a ready lane that has had less than its configured share of the
last ``window`` contended batches goes first, the one furthest below its share first.
With every lane backlogged and shares 70/25/5, high gets ~70% of the batches, normal
~25% and low ~5%; with only high and low backlogged, low still gets its 5%.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Mapping

from consumers.contract import Priority


class LaneShares:
    def __init__(self, shares: Mapping[Priority, float], *, window: int = 100) -> None:
        self._shares = dict(shares)
        self._served: deque[Priority] = deque(maxlen=window)
        self._counts: Counter[Priority] = Counter()

    def owed(self, ready: Iterable[Priority]) -> Priority | None:
        """The ready lane furthest below its share, or None (strict priority decides).

        ``ready``: lanes that can close a batch now, highest first; ties go to the
        higher lane.
        """
        total = len(self._served) + 1  # counting the batch about to be formed
        best: tuple[float, Priority] | None = None
        for lane in ready:
            deficit = self._shares.get(lane, 0.0) * total - self._counts[lane]
            if deficit > 0 and (best is None or deficit > best[0]):
                best = (deficit, lane)
        return None if best is None else best[1]

    def served(self, lane: Priority) -> None:
        """Count one batch formed under contention for ``lane``."""
        if len(self._served) == self._served.maxlen:
            self._counts[self._served[0]] -= 1
        self._served.append(lane)
        self._counts[lane] += 1
