"""Kafka plumbing for scenarios: topics, bulk publishing, and a results reader."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition

from bench.measure import Arrival
from bench.workloads import Record
from consumers.topics import ensure_topics
from worker.settings import TopicConfig

TOPICS = TopicConfig()
PARTITIONS = 3
_CHUNK = 5000


async def create_topics(bootstrap: str) -> None:
    """The lane, results and dead-letter topics, as the worker would create them."""
    names = [*TOPICS.lane_topics(), TOPICS.results, TOPICS.dead_letters]
    await ensure_topics(bootstrap, names, partitions=PARTITIONS)


def producer(bootstrap: str) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=5, max_batch_size=1 << 20, acks=1
    )


async def publish(bootstrap: str, topic: str, items: Iterable[Record]) -> int:
    """Send every record and wait until the broker has them all; return how many."""
    sent = 0
    prod = producer(bootstrap)
    await prod.start()
    try:
        pending: list[asyncio.Future[object]] = []
        for key, value in items:
            pending.append(await prod.send(topic, value, key=key))
            if len(pending) >= _CHUNK:
                await asyncio.gather(*pending)
                sent, pending = sent + len(pending), []
        await asyncio.gather(*pending)
        return sent + len(pending)
    finally:
        await prod.stop()


@dataclass
class ResultsReader:
    """Reads the results topic from its beginning (no consumer group, no join delay).

    Values are kept as bytes and parsed after the run, so that the reader spends as
    little CPU as it can while the system under test runs beside it. Each offset counts
    once: a fetch that brings records again (after a reset of the reader's position)
    adds them to ``repeats``, not to the results; offsets a fetch jumps over add to
    ``skipped``.
    """

    bootstrap: str
    topic: str = TOPICS.results
    arrivals: list[Arrival] = field(default_factory=list)
    count: int = 0
    repeats: int = 0
    skipped: int = 0
    _next: dict[int, int] = field(default_factory=dict)  # per partition: the next offset
    _consumer: AIOKafkaConsumer | None = None

    async def start(self) -> ResultsReader:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            enable_auto_commit=False,
            max_partition_fetch_bytes=8 << 20,
            fetch_max_bytes=32 << 20,
            # The broker holds an empty fetch up to this long and sees a result that lands
            # meanwhile only at its next look: the default (500 ms) would add up to a
            # quarter of a second to every end-to-end latency measured here.
            fetch_max_wait_ms=5,
        )
        await consumer.start()
        parts = consumer.partitions_for_topic(self.topic) or set()
        tps = [TopicPartition(self.topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        self._consumer = consumer
        return self

    async def stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None

    async def poll(self, timeout_ms: int = 100) -> int:
        """One fetch; returns how many results it brought."""
        assert self._consumer is not None, "start() first"
        batches = await self._consumer.getmany(timeout_ms=timeout_ms, max_records=20_000)
        messages = [m for msgs in batches.values() for m in msgs if self._first_time(m)]
        values = [m.value for m in messages]
        if values:
            stamps = [m.timestamp for m in messages]
            self.arrivals.append(Arrival(time.monotonic(), time.time(), values, stamps))
            self.count += len(values)
        return len(values)

    def _first_time(self, m: ConsumerRecord[bytes, bytes]) -> bool:
        """Whether ``m`` is a result not read before; tracks the partition's offsets."""
        expected = self._next.get(m.partition)
        if expected is not None and m.offset < expected:
            self.repeats += 1
            return False
        if expected is not None:
            self.skipped += m.offset - expected
        self._next[m.partition] = m.offset + 1
        return m.value is not None

    async def until(self, n: int, *, timeout_s: float, run_s: float | None = None) -> bool:
        """Read until ``n`` results, ``timeout_s`` overall, or ``run_s`` after the first
        result (a time-bounded run); True if all ``n`` arrived."""
        deadline = time.monotonic() + timeout_s
        while self.count < n and time.monotonic() < deadline:
            await self.poll()
            if (
                run_s is not None
                and self.arrivals
                and time.monotonic() - self.arrivals[0].mono_s >= run_s
            ):
                break
        return self.count >= n

    def values(self) -> list[bytes]:
        return [v for a in self.arrivals for v in a.values]
