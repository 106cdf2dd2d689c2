"""The Kafka side of intake: a consumer group over the lane topics.

A thin facade over aiokafka: fetch raw records, hold topics back for backpressure,
seek and commit positions, and hand rebalances to the owner.

The urgent topics (the high lane) are read by a second consumer on its own connection.
One consumer sends one fetch at a time to a broker, and a fetch that carries bulk
records can take a loaded broker hundreds of milliseconds to serve: a high request
must not wait for it. That consumer joins no group: it reads the urgent partitions the
group assigns to this member (kept paused on the group's consumer), from the group's
committed offsets unless the owner seeks elsewhere; commits go through the group.

Each consumer keeps one fetch in flight, and the broker holds an empty one for the
fetch's max wait (Tansu sees a record that lands meanwhile only at its next look, up to
about half the wait later), so a short wait is a poll: a cost in CPU on both sides,
paid only where it buys latency. The group's consumer waits longer while its owner says
it is busy (``pace_bulk``), and the urgent reader once its topics have been quiet for
``URGENT_QUIET_AFTER_S``; its first record after that switches it back. ``FetchWaits``
holds the four waits, tuned to the embedded broker.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

from consumers.config import KafkaConfig
from consumers.offsets import TopicPartitionKey
from consumers.records import RawRecord, SourceRef

PartitionsCallback = Callable[[set[TopicPartitionKey]], Awaitable[None]]

URGENT_QUIET_AFTER_S = 10.0


@dataclass(frozen=True, slots=True)
class FetchWaits:
    """Longest a fetch waits at the broker, per consumer and pace, in ms.

    Tansu looks for data as a fetch comes, then after sleeping half the time left, and
    so on: a record that lands meanwhile waits for the next look, up to about half the
    wait (aiokafka's default 500 ms gave p50 150 ms). Polls cost CPU in the worker and
    the broker: an idle worker and its Tansu took 0.2 cores with ``bulk`` and ``urgent``
    alone.
    """

    bulk: int = 20  # the group's consumer
    urgent: int = 5  # the high topic's reader: a high record waits about half of this
    # The group's consumer while its owner is busy (a bulk lane behind, or every bulk
    # topic paused): what it brings would only wait.
    busy_bulk: int = 100
    # The high topic's reader once quiet for URGENT_QUIET_AFTER_S (its next fetch after
    # a record waits ``urgent`` again).
    quiet_urgent: int = 25


class _Pace:
    """One consumer's fetch max wait: brisk or slow, from its next fetch request on."""

    def __init__(self, consumer: AIOKafkaConsumer, brisk_ms: int, slow_ms: int) -> None:
        self._consumer = consumer
        self._waits = (brisk_ms, slow_ms)
        self.wait_ms = brisk_ms  # what the consumer was made with

    def set(self, slow: bool) -> None:
        wait_ms = self._waits[slow]
        if wait_ms != self.wait_ms:
            # aiokafka has no public setter; its fetcher (made by start()) reads this
            # attribute for every request it builds.
            self._consumer._fetcher._fetch_max_wait_ms = wait_ms
            self.wait_ms = wait_ms


class _Listener(ConsumerRebalanceListener):
    def __init__(self, on_assigned: PartitionsCallback, on_revoked: PartitionsCallback) -> None:
        self._on_assigned = on_assigned
        self._on_revoked = on_revoked

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self._on_revoked({(tp.topic, tp.partition) for tp in revoked})

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        await self._on_assigned({(tp.topic, tp.partition) for tp in assigned})


class Ingress:
    def __init__(
        self,
        bootstrap: str,
        config: KafkaConfig,
        *,
        topics: list[str],
        urgent_topics: set[str],
        waits: FetchWaits = FetchWaits(),
    ) -> None:
        self._topics = topics
        self._urgent = urgent_topics
        self._max_records = config.fetch_max_records
        common = {
            "bootstrap_servers": bootstrap,
            "client_id": config.client_id,
            "enable_auto_commit": False,  # we commit only what is durable
            "auto_offset_reset": "earliest",
            "fetch_max_wait_ms": waits.bulk,
            # Oversized records must still arrive, so that they can be dead-lettered.
            "max_partition_fetch_bytes": max(1_048_576, 2 * config.max_message_bytes),
            **config.security.aiokafka_kwargs(),
        }
        session_ms = config.session_timeout_ms
        self._consumer = AIOKafkaConsumer(
            group_id=config.group_id,
            session_timeout_ms=session_ms,
            heartbeat_interval_ms=max(1000, session_ms // 10),
            **common,
        )
        urgent = {**common, "fetch_max_wait_ms": waits.urgent}
        self._urgent_reader = AIOKafkaConsumer(**urgent) if urgent_topics else None
        self._bulk_pace = _Pace(self._consumer, waits.bulk, waits.busy_bulk)
        self._urgent_pace = (
            _Pace(self._urgent_reader, waits.urgent, waits.quiet_urgent)
            if self._urgent_reader is not None
            else None
        )
        self._urgent_seen_s = time.monotonic()  # the reader starts polling as if just used
        # Partitions whose records fetch() leaves in the consumer for now (backpressure).
        # Not paused in aiokafka: that throws a partition's fetched data away, to be
        # fetched again, in a reference cycle only a full collector pass frees. aiokafka
        # sends no new fetch for a partition whose data waits: one fetch each, at most.
        self._held: set[TopicPartition] = set()
        self.revocations = 0  # rebalances that took partitions away, so far

    @property
    def has_urgent(self) -> bool:
        """Whether urgent topics are fetched apart (``fetch(urgent=True)``)."""
        return self._urgent_reader is not None

    async def start(
        self,
        on_assigned: PartitionsCallback,
        on_revoked: PartitionsCallback,
        *,
        urgent_context: contextvars.Context | None = None,
    ) -> None:
        """``urgent_context``: the context the urgent reader starts in, and with it the
        tasks and connections it makes (the caller's own when None)."""
        if self._urgent_reader is not None:
            await asyncio.create_task(self._urgent_reader.start(), context=urgent_context)
        await self._consumer.start()
        listener = _Listener(self._assigned(on_assigned), self._revoked(on_revoked))
        self._consumer.subscribe(self._topics, listener=listener)

    async def stop(self) -> None:
        await self._consumer.stop()
        if self._urgent_reader is not None:
            await self._urgent_reader.stop()

    def _assigned(self, then: PartitionsCallback) -> PartitionsCallback:
        async def assigned(keys: set[TopicPartitionKey]) -> None:
            if self._urgent_reader is not None:
                urgent = [TopicPartition(*tp) for tp in keys if tp[0] in self._urgent]
                self._consumer.pause(*urgent)  # the group's consumer never fetches them
                self._urgent_reader.assign(urgent)
                for tp in urgent:
                    offset = await self._consumer.committed(tp)
                    if offset is not None:  # else auto_offset_reset: the earliest
                        self._urgent_reader.seek(tp, offset)
            await then(keys)

        return assigned

    def _revoked(self, then: PartitionsCallback) -> PartitionsCallback:
        async def revoked(keys: set[TopicPartitionKey]) -> None:
            self.revocations += 1
            self._held -= {TopicPartition(*tp) for tp in keys}
            if self._urgent_reader is not None:  # stop reading them first
                kept = [tp for tp in self._urgent_reader.assignment() if _key(tp) not in keys]
                self._urgent_reader.assign(kept)
            await then(keys)

        return revoked

    def _reader_of(self, tp: TopicPartitionKey) -> AIOKafkaConsumer:
        if self._urgent_reader is not None and tp[0] in self._urgent:
            return self._urgent_reader
        return self._consumer

    async def fetch(
        self, timeout_ms: int, *, urgent: bool = False, max_records: int | None = None
    ) -> list[RawRecord]:
        """Up to ``max_records`` (at most the configured number) of the urgent topics
        (``urgent``, when they are fetched apart) or of the others; what is not taken
        waits in the consumer."""
        consumer = self._urgent_reader if urgent else self._consumer
        assert consumer is not None, "no urgent topics are fetched apart"
        limit = self._max_records if max_records is None else min(max_records, self._max_records)
        wanted = [tp for tp in consumer.assignment() if tp not in self._held]
        if not wanted or limit < 1:  # getmany() of no partitions would take every one
            await asyncio.sleep(timeout_ms / 1000)
            return []
        if self._urgent_pace is not None and urgent:
            quiet = time.monotonic() - self._urgent_seen_s >= URGENT_QUIET_AFTER_S
            self._urgent_pace.set(slow=quiet)
        batches = await consumer.getmany(*wanted, timeout_ms=timeout_ms, max_records=limit)
        now = time.monotonic()
        if urgent and batches:
            self._urgent_seen_s = now
        return [
            RawRecord(SourceRef(m.topic, m.partition, m.offset), m.key, m.value, now, m.timestamp)
            for messages in batches.values()
            for m in messages
        ]

    def set_paused(self, topics: set[str]) -> None:
        """Hold back exactly these topics' partitions: fetch() returns none of their
        records until released; what was fetched waits, the rest stays in Kafka."""
        for tp in self._consumer.assignment():
            if tp.topic in topics:
                self._held.add(tp)
            else:
                self._held.discard(tp)

    def pace_bulk(self, slow: bool) -> None:
        """Whether the group's consumer polls slowly: its owner says so while whatever
        it brings would wait behind records already taken, or could not be taken."""
        self._bulk_pace.set(slow)

    def fetch_waits_ms(self) -> tuple[int, int | None]:
        """The max wait of the group consumer's next fetch, and of the urgent reader's
        (None without one)."""
        urgent = self._urgent_pace.wait_ms if self._urgent_pace is not None else None
        return self._bulk_pace.wait_ms, urgent

    def assignment(self) -> set[TopicPartitionKey]:
        return {_key(tp) for tp in self._consumer.assignment()}

    def paused(self) -> set[TopicPartitionKey]:
        return {tp for tp in self.assignment() if TopicPartition(*tp) in self._held}

    async def lag(self) -> dict[TopicPartitionKey, int]:
        """Records behind the high watermark of each partition's last fetch.

        Partitions not fetched yet are left out. On the embedded broker (Tansu) the fetch
        watermark is right while ListOffsets is not (it counts batches), so this is the
        only lag to trust there, and it is as old as the last fetch.
        """
        lag = {}
        for tp in self._consumer.assignment():
            reader = self._reader_of(_key(tp))
            highwater = reader.highwater(tp)
            if highwater is None:
                continue
            position = await reader.position(tp)  # valid once fetched: no wait
            lag[_key(tp)] = max(0, highwater - position)
        return lag

    async def committed(self, tp: TopicPartitionKey) -> int | None:
        result = await self._consumer.committed(TopicPartition(*tp))
        return None if result is None else int(result)

    def seek(self, tp: TopicPartitionKey, offset: int) -> None:
        self._reader_of(tp).seek(TopicPartition(*tp), offset)

    async def commit(self, positions: dict[TopicPartitionKey, int]) -> None:
        if positions:
            await self._consumer.commit({TopicPartition(*tp): o for tp, o in positions.items()})


def _key(tp: TopicPartition) -> TopicPartitionKey:
    return (tp.topic, tp.partition)
