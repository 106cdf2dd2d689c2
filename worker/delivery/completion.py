"""Finished outcomes waiting for the sink, in two streams: urgent (the high lane) and bulk.

Each stream has its own publish stage, so a high-priority result never waits behind a
bulk chunk's produce, nor behind its SQL write: its durability follows in the next
transaction. Within the bulk stream, normal comes before low. Nothing here needs a
bound of its own: everything in it counts against the worker's in-flight budget.
"""

from __future__ import annotations

import asyncio
from collections import deque

from consumers.contract import Priority
from worker.base.pending import Outcome

URGENT = (Priority.HIGH,)
BULK = (Priority.NORMAL, Priority.LOW)


class CompletionQueue:
    def __init__(self) -> None:
        self._lanes: dict[Priority, deque[Outcome]] = {p: deque() for p in (*URGENT, *BULK)}
        self._ready = {URGENT: asyncio.Event(), BULK: asyncio.Event()}

    def __len__(self) -> int:
        return sum(len(q) for q in self._lanes.values())

    def put(self, outcomes: list[Outcome]) -> None:
        for o in outcomes:
            # A dead letter without a result (no request id) has no lane: normal.
            lane = o.result.priority if o.result is not None else Priority.NORMAL
            self._lanes[lane].append(o)
            self._ready[URGENT if lane in URGENT else BULK].set()

    async def take(self, limit: int, lanes: tuple[Priority, ...]) -> list[Outcome]:
        """Up to ``limit`` outcomes of ``lanes`` (``URGENT`` or ``BULK``), in that order;
        waits while there are none."""
        ready = self._ready[lanes]
        while not any(self._lanes[p] for p in lanes):
            ready.clear()
            await ready.wait()
        chunk: list[Outcome] = []
        for p in lanes:
            queue = self._lanes[p]
            while queue and len(chunk) < limit:
                chunk.append(queue.popleft())
        return chunk
