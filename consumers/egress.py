"""The Kafka side of output: results and dead letters, produced per chunk, awaited once."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer


@dataclass(frozen=True, slots=True)
class OutRecord:
    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] | None = None


class Egress:
    def __init__(self, *, bootstrap: str, client_id: str, linger_ms: int, max_bytes: int) -> None:
        # No idempotence nor transactions: the embedded broker supports neither, and
        # results are at-least-once by contract (keyed by request id).
        self._producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            client_id=client_id,
            acks="all",
            linger_ms=linger_ms,
            max_request_size=max(1_048_576, 2 * max_bytes),
            max_batch_size=1_048_576,
        )

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        await self._producer.stop()

    async def publish(self, records: list[OutRecord]) -> None:
        """Send all, then wait until every one is acknowledged (raises on failure)."""
        send = self._producer.send
        pending = [
            await send(r.topic, value=r.value, key=r.key, headers=r.headers) for r in records
        ]
        if pending:
            await asyncio.gather(*pending)
