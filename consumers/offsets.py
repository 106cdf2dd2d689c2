"""Per-partition offset tracking: commit only the contiguous prefix of finished records.

Kafka delivers a partition in offset order, so each partition keeps a FIFO of the
offsets it has handed out; finishing marks one, and the committable position is the
first offset still unfinished (or one past the last finished when none is).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

TopicPartitionKey = tuple[str, int]


@dataclass(slots=True)
class _Partition:
    pending: deque[int] = field(default_factory=deque)
    outstanding: set[int] = field(default_factory=set)  # = set(pending), for O(1) lookups
    finished: set[int] = field(default_factory=set)
    next_offset: int | None = None  # committable position, None until something finishes
    committed: int | None = None  # last position handed out by ``take_commits``


class OffsetTracker:
    def __init__(self) -> None:
        self._parts: dict[TopicPartitionKey, _Partition] = {}

    def started(self, tp: TopicPartitionKey, offset: int) -> None:
        part = self._parts.setdefault(tp, _Partition())
        part.pending.append(offset)
        part.outstanding.add(offset)

    def finished(self, tp: TopicPartitionKey, offset: int) -> None:
        part = self._parts.get(tp)
        # Unknown partition or offset: it was revoked meanwhile and its new owner replays it.
        if part is None or offset not in part.outstanding:
            return
        part.finished.add(offset)
        pending = part.pending
        while pending and pending[0] in part.finished:
            done = pending.popleft()
            part.finished.discard(done)
            part.outstanding.discard(done)
            part.next_offset = done + 1

    def take_commits(self) -> dict[TopicPartitionKey, int]:
        """Positions that moved since the last call: what to store and commit now."""
        moved: dict[TopicPartitionKey, int] = {}
        for tp, part in self._parts.items():
            if part.next_offset is not None and part.next_offset != part.committed:
                moved[tp] = part.committed = part.next_offset
        return moved

    def in_flight(self) -> int:
        return sum(len(p.pending) for p in self._parts.values())

    def forget(self, tps: set[TopicPartitionKey]) -> None:
        for tp in tps:
            self._parts.pop(tp, None)
