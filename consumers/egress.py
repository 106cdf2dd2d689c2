"""The Kafka side of output: results and dead letters, produced per chunk, awaited once."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.producer.message_accumulator import BatchBuilder

from consumers.security import KafkaSecurity


@dataclass(frozen=True, slots=True)
class OutRecord:
    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] | None = None


class Egress:
    """Builds one record batch per partition instead of one ``send`` per record: the
    per-record path of aiokafka costs about 3x more in Python, and this runs for
    every result. Keys map to partitions with Kafka's default (murmur2) partitioner,
    as any Kafka client would place them."""

    def __init__(
        self,
        *,
        bootstrap: str,
        client_id: str,
        linger_ms: int,
        max_request_bytes: int,
        security: KafkaSecurity | None = None,
    ) -> None:
        # No idempotence nor transactions: the embedded broker supports neither, and
        # results are at-least-once by contract (keyed by request id).
        self._producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            client_id=client_id,
            acks="all",
            linger_ms=linger_ms,
            max_request_size=max_request_bytes,
            max_batch_size=1_048_576,
            **(security or KafkaSecurity()).aiokafka_kwargs(),
        )
        self._partitioner = DefaultPartitioner()
        self._partitions: dict[str, list[int]] = {}

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        await self._producer.stop()

    async def publish(self, records: list[OutRecord]) -> None:
        """Send all, then wait until every one is acknowledged (raises on failure)."""
        open_batches: dict[tuple[str, int], BatchBuilder] = {}
        sent: list[asyncio.Future[object]] = []
        for r in records:
            dest = (r.topic, await self._partition(r.topic, r.key))
            batch = open_batches.get(dest)
            if batch is None:
                batch = open_batches[dest] = self._producer.create_batch()
            if batch.append(key=r.key, value=r.value, timestamp=None, headers=r.headers) is None:
                sent.append(await self._producer.send_batch(batch, dest[0], partition=dest[1]))
                batch = open_batches[dest] = self._producer.create_batch()
                batch.append(key=r.key, value=r.value, timestamp=None, headers=r.headers)
        for (topic, partition), batch in open_batches.items():
            sent.append(await self._producer.send_batch(batch, topic, partition=partition))
        if sent:
            await asyncio.gather(*sent)

    async def _partition(self, topic: str, key: bytes | None) -> int:
        partitions = self._partitions.get(topic)
        if partitions is None:
            known = await self._producer.partitions_for(topic)
            partitions = self._partitions[topic] = sorted(known)
        return int(self._partitioner(key, partitions, partitions))
