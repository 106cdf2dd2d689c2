"""Kafka offset commits, coalesced: at most one every ``interval_s``, carrying the newest
durable offset of each partition.

SQL holds the offsets a restart resumes from (``Worker._on_assigned``); the group's
commit in Kafka is the copy its tools read (lag, ``kafka-consumer-groups``). Committing
after every durable chunk cost a broker request per high result, and under a minilm
backlog the high requests' cost to it fell by about a fifth without those commits
(docs/SCHEDULING.md). Revocation and shutdown call ``flush`` so the group's copy is
current when partitions change hands.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping

from consumers.offsets import TopicPartitionKey

log = logging.getLogger(__name__)

Commit = Callable[[dict[TopicPartitionKey, int]], Awaitable[None]]


class CoalescedCommits:
    def __init__(self, commit: Commit, interval_s: float) -> None:
        self._commit = commit  # the consumer group's offset commit
        self._interval_s = interval_s
        self._pending: dict[TopicPartitionKey, int] = {}
        self._ready = asyncio.Event()
        self._lock = asyncio.Lock()  # one commit at a time: the task's or a flush's

    def add(self, offsets: Mapping[TopicPartitionKey, int]) -> None:
        """Durable offsets to commit; a partition's newer offset replaces its older one."""
        if offsets:
            self._pending.update(offsets)
            self._ready.set()

    def forget(self, partitions: Iterable[TopicPartitionKey]) -> None:
        """Drop what is pending for partitions no longer this worker's."""
        for tp in partitions:
            self._pending.pop(tp, None)

    async def run(self) -> None:
        """The task: commit what is pending, then wait out the interval, forever."""
        while True:
            await self._ready.wait()
            await self.flush()
            await asyncio.sleep(self._interval_s)

    async def flush(self) -> None:
        """Commit everything pending now (after a commit under way ends)."""
        async with self._lock:
            self._ready.clear()
            offsets, self._pending = self._pending, {}
            if not offsets:
                return
            try:
                await self._commit(offsets)
            except asyncio.CancelledError:  # stopping: a flush after it commits them
                self._keep(offsets)
                raise
            except Exception as exc:  # SQL holds the offsets; Kafka's copy catches up later
                log.warning("offset commit to Kafka failed (%s); SQL has them", exc)
                self._keep(offsets)

    def _keep(self, offsets: dict[TopicPartitionKey, int]) -> None:
        """Offsets a commit did not take, pending again unless a newer one came."""
        for tp, offset in offsets.items():
            self._pending.setdefault(tp, offset)
        self._ready.set()
