"""Delivery: finished outcomes to Kafka, then to SQL with the offsets they complete,
then the offsets to Kafka (coalesced, ``worker.delivery.commits``).

Four tasks: one publish stream per completion stream (urgent, bulk), so a high result
never waits behind a bulk chunk's produce or SQL write; one persist task that runs
beside them, so one chunk's SQL write overlaps the next one's produce; and the offset
commits. When SQL falls behind, bulk publishing waits for one of two slots; urgent
chunks never wait. While high requests are in the worker, bulk chunks wait before
their produce (``worker.scheduling.yield_to_high``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence

from consumers.contract import Priority
from consumers.offsets import OffsetTracker, TopicPartitionKey
from worker.base.pending import Outcome
from worker.base.urgent_loop import urgent_context
from worker.delivery.commits import CoalescedCommits, Commit
from worker.delivery.completion import BULK, URGENT, CompletionQueue
from worker.delivery.sink import Sink
from worker.scheduling.yield_to_high import YieldToHigh


class Delivery:
    def __init__(
        self,
        sink: Sink,
        done: CompletionQueue,
        tracker: OffsetTracker,
        *,
        commit: Commit,
        commit_interval_s: float,
        max_chunk: int,
        on_durable: Callable[[Sequence[Outcome]], None],
        yield_to_high: YieldToHigh | None = None,
    ) -> None:
        self._sink = sink
        self._done = done
        self._tracker = tracker
        self._commits = CoalescedCommits(commit, commit_interval_s)
        self._max_chunk = max_chunk
        self._on_durable = on_durable
        self._yield = yield_to_high or YieldToHigh(None)
        # Published chunks waiting for SQL, with whether each holds a bulk slot.
        self._published: asyncio.Queue[tuple[list[Outcome], bool]] = asyncio.Queue()
        self._bulk_slots = asyncio.Semaphore(2)
        self._writing: asyncio.Future[None] | None = None  # the SQL write under way

    def start(self) -> list[asyncio.Task[None]]:
        return [
            asyncio.create_task(
                self._publish(URGENT), name="inferlane-publish-urgent", context=urgent_context()
            ),
            asyncio.create_task(self._publish(BULK), name="inferlane-publish"),
            asyncio.create_task(self._persist(), name="inferlane-persist"),
            asyncio.create_task(self._commits.run(), name="inferlane-commit"),
        ]

    async def finish_write(self) -> None:
        """After the tasks are cancelled: let a started SQL write end, so its chunk is
        either durable or replayed, never half-written."""
        if self._writing is not None:
            await asyncio.shield(self._writing)

    async def commit_now(self, then_forget: Iterable[TopicPartitionKey] = ()) -> None:
        """Commit the durable offsets to Kafka now (partitions change hands, or the
        worker stops), then drop what is pending for ``then_forget``."""
        try:
            await self._commits.flush()
        finally:  # even if the commit overran its time: they are no longer ours
            self._commits.forget(then_forget)

    async def _publish(self, lanes: tuple[Priority, ...]) -> None:
        """Results and dead letters to Kafka, acknowledged."""
        bulk = lanes == BULK
        while True:
            chunk = await self._done.take(self._max_chunk, lanes)
            if bulk:
                await self._yield.held()
            await self._sink.publish(chunk, urgent=not bulk)
            if bulk:
                await self._bulk_slots.acquire()
            else:
                self._yield.left(len(chunk))  # every urgent outcome is a high request's
            self._published.put_nowait((chunk, bulk))

    async def _persist(self) -> None:
        """SQL (results, drift, offsets in one transaction), then the Kafka commit. Only
        outcomes already on Kafka count as finished for the offsets."""
        while True:
            chunk, slots = await self._take_published()
            for o in chunk:
                src = o.record.source
                self._tracker.finished((src.topic, src.partition), src.offset)
            offsets = self._tracker.take_commits()
            self._writing = asyncio.ensure_future(self._make_durable(chunk, offsets))
            await asyncio.shield(self._writing)
            for _ in range(slots):
                self._bulk_slots.release()

    async def _take_published(self) -> tuple[list[Outcome], int]:
        """Every published chunk waiting, as one; and how many bulk slots they hold."""
        chunk, bulk = await self._published.get()
        slots = int(bulk)
        while not self._published.empty():
            more, bulk = self._published.get_nowait()
            chunk.extend(more)
            slots += bulk
        return chunk, slots

    async def _make_durable(
        self, chunk: Sequence[Outcome], offsets: dict[TopicPartitionKey, int]
    ) -> None:
        await self._sink.persist(chunk, offsets)
        self._commits.add(offsets)
        self._on_durable(chunk)
