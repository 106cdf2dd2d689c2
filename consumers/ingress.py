"""The Kafka side of intake: a consumer group over the lane topics.

A thin facade over aiokafka: fetch raw records, pause/resume topics for
backpressure, seek and commit positions, and hand rebalances to the owner.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

from consumers.offsets import TopicPartitionKey
from consumers.records import RawRecord, SourceRef
from consumers.security import KafkaSecurity

PartitionsCallback = Callable[[set[TopicPartitionKey]], Awaitable[None]]


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
        *,
        bootstrap: str,
        topics: list[str],
        urgent_topics: set[str],
        group_id: str,
        client_id: str,
        max_records: int,
        max_wait_ms: int,
        max_message_bytes: int,
        session_timeout_ms: int,
        security: KafkaSecurity | None = None,
    ) -> None:
        self._topics = topics
        self._urgent = urgent_topics
        self._max_records = max_records
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group_id,
            client_id=client_id,
            enable_auto_commit=False,  # we commit only what is durable
            auto_offset_reset="earliest",
            fetch_max_wait_ms=max_wait_ms,
            # Oversized records must still arrive, so that they can be dead-lettered.
            max_partition_fetch_bytes=max(1_048_576, 2 * max_message_bytes),
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=max(1000, session_timeout_ms // 10),
            **(security or KafkaSecurity()).aiokafka_kwargs(),
        )

    async def start(self, on_assigned: PartitionsCallback, on_revoked: PartitionsCallback) -> None:
        await self._consumer.start()
        self._consumer.subscribe(self._topics, listener=_Listener(on_assigned, on_revoked))

    async def stop(self) -> None:
        await self._consumer.stop()

    async def fetch(self, timeout_ms: int) -> list[RawRecord]:
        """Up to ``max_records``; the urgent topics' buffered records come first, so a
        high-priority request never waits behind a fetch full of bulk traffic."""
        urgent = [tp for tp in self._consumer.assignment() if tp.topic in self._urgent]
        batches = {}
        if urgent:
            batches = await self._consumer.getmany(
                *urgent, timeout_ms=0, max_records=self._max_records
            )
        room = self._max_records - sum(len(b) for b in batches.values())
        if room > 0:
            rest = await self._consumer.getmany(
                timeout_ms=0 if batches else timeout_ms, max_records=room
            )
            for tp, messages in rest.items():
                batches.setdefault(tp, []).extend(messages)
        now = time.monotonic()
        return [
            RawRecord(SourceRef(m.topic, m.partition, m.offset), m.key, m.value, now, m.timestamp)
            for messages in batches.values()
            for m in messages
        ]

    def set_paused(self, topics: set[str]) -> None:
        """Pause exactly these topics' partitions; Kafka keeps their data meanwhile."""
        assigned = self._consumer.assignment()
        self._consumer.resume(*(tp for tp in assigned if tp.topic not in topics))
        self._consumer.pause(*(tp for tp in assigned if tp.topic in topics))

    def assignment(self) -> set[TopicPartitionKey]:
        return {(tp.topic, tp.partition) for tp in self._consumer.assignment()}

    def paused(self) -> set[TopicPartitionKey]:
        return {(tp.topic, tp.partition) for tp in self._consumer.paused()}

    async def lag(self) -> dict[TopicPartitionKey, int]:
        """Records behind the high watermark of each partition's last fetch.

        Partitions not fetched yet are left out. On the embedded broker (Tansu) the fetch
        watermark is right while ListOffsets is not (it counts batches), so this is the
        only lag to trust there, and it is as old as the last fetch.
        """
        lag = {}
        for tp in self._consumer.assignment():
            highwater = self._consumer.highwater(tp)
            if highwater is None:
                continue
            position = await self._consumer.position(tp)  # valid once fetched: no wait
            lag[(tp.topic, tp.partition)] = max(0, highwater - position)
        return lag

    async def committed(self, tp: TopicPartitionKey) -> int | None:
        result = await self._consumer.committed(TopicPartition(*tp))
        return None if result is None else int(result)

    def seek(self, tp: TopicPartitionKey, offset: int) -> None:
        self._consumer.seek(TopicPartition(*tp), offset)

    async def commit(self, positions: dict[TopicPartitionKey, int]) -> None:
        if positions:
            await self._consumer.commit({TopicPartition(*tp): o for tp, o in positions.items()})
