"""Finished outcomes waiting for the sink, taken high lane first.

A burst of low-priority results already computed must not hold back a high-priority
result that finished after it: the sink takes from the highest lane that has any.
"""

from __future__ import annotations

import asyncio
from collections import deque

from consumers.contract import Priority
from worker.lanes import LANE_ORDER
from worker.pending import Outcome


class CompletionQueue:
    def __init__(self) -> None:
        self._lanes: dict[Priority, deque[Outcome]] = {p: deque() for p in LANE_ORDER}
        self._size = 0
        self._ready = asyncio.Event()

    def __len__(self) -> int:
        return self._size

    def put(self, outcomes: list[Outcome]) -> None:
        for o in outcomes:
            # A dead letter without a result (no request id) has no lane: normal.
            lane = o.result.priority if o.result is not None else Priority.NORMAL
            self._lanes[lane].append(o)
        self._size += len(outcomes)
        if self._size:
            self._ready.set()

    async def take(self, limit: int) -> list[Outcome]:
        """Up to ``limit`` outcomes, highest lane first; waits while there are none."""
        while not self._size:
            self._ready.clear()
            await self._ready.wait()
        chunk: list[Outcome] = []
        for lane in self._lanes.values():
            while lane and len(chunk) < limit:
                chunk.append(lane.popleft())
        self._size -= len(chunk)
        return chunk
