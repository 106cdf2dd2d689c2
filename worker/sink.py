"""The sink makes a chunk of outcomes durable, in the order the contract needs.

1. Kafka: results (to the results topic or the request's ``reply_to``) and dead
   letters, all acknowledged. A crash after this replays the chunk: Kafka results
   are at-least-once by contract.
2. SQL, one transaction: results upserted by request id, drift rows, and the
   consumed offsets these outcomes complete. Exactly once per request id.
The caller runs the steps in this order for every outcome, and commits the Kafka
offsets after ``persist`` returns.

Transient failures (broker or database down) are retried with backoff, forever:
nothing is dropped, and backpressure pauses intake meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime

from aiokafka.errors import KafkaError

from consumers.contract import DeadLetterHeaders
from consumers.egress import Egress, OutRecord
from consumers.offsets import TopicPartitionKey
from consumers.records import DeadLetter
from storage import DriftRow, OffsetRow, ResultRow, ResultStore, StoreUnavailable
from worker.config import SinkConfig
from worker.pending import Outcome

log = logging.getLogger(__name__)


class Sink:
    def __init__(
        self,
        *,
        egress: Egress,
        store: ResultStore,
        results_topic: str,
        dead_letter_topic: str,
        group_id: str,
        max_value_bytes: int,
        config: SinkConfig,
    ) -> None:
        self._egress = egress
        self._store = store
        self._results_topic = results_topic
        self._dlq_topic = dead_letter_topic
        self._group_id = group_id
        self._max_value_bytes = max_value_bytes
        self._config = config

    async def publish(self, outcomes: Sequence[Outcome]) -> None:
        """Step 1: every result and dead letter acknowledged by Kafka."""
        # Serializing every result is per-record work: keep it off the event loop.
        records = await asyncio.to_thread(self._kafka_records, outcomes)
        await self._retry("kafka", lambda: self._egress.publish(records))

    async def persist(
        self, outcomes: Sequence[Outcome], offsets: dict[TopicPartitionKey, int]
    ) -> None:
        """Step 2, for outcomes already published: one SQL transaction."""
        positions = [OffsetRow(self._group_id, t, p, o) for (t, p), o in offsets.items()]
        await self._retry("database", lambda: asyncio.to_thread(self._write, outcomes, positions))

    def _write(self, outcomes: Sequence[Outcome], positions: list[OffsetRow]) -> None:
        # Runs in a thread: building the rows is per-record work too.
        results, drift = _rows(outcomes)
        self._store.write(results, drift, positions)

    def _kafka_records(self, outcomes: Sequence[Outcome]) -> list[OutRecord]:
        out = []
        for o in outcomes:
            if o.dead_letter is not None:
                out.append(self._dead_letter_record(o.dead_letter))
            if o.result is not None:
                r = o.result
                value = r.model_dump_json().encode()
                out.append(
                    OutRecord(o.reply_to or self._results_topic, r.request_id.encode(), value)
                )
        return out

    def _dead_letter_record(self, d: DeadLetter) -> OutRecord:
        headers = d.headers()
        value = d.value
        # Bytes past what any produce request may carry would stall the sink forever;
        # the headers still say where the original lies (topic, partition, offset).
        if value is not None and len(value) > 2 * self._max_value_bytes:
            headers.append((DeadLetterHeaders.VALUE_OMITTED, str(len(value)).encode()))
            value = None
        return OutRecord(self._dlq_topic, d.key, value, headers)

    async def _retry(self, what: str, attempt: Callable[[], Awaitable[None]]) -> None:
        delay = self._config.retry_backoff_s
        while True:
            try:
                await attempt()
                return
            except (KafkaError, StoreUnavailable) as exc:
                log.warning("%s unavailable (%s); retrying in %.1fs", what, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._config.retry_backoff_max_s)


def _rows(outcomes: Sequence[Outcome]) -> tuple[list[ResultRow], list[DriftRow]]:
    now = datetime.now(UTC)
    results, drift = [], []
    for o in outcomes:
        r = o.result
        if r is None:
            continue
        src = o.record.source
        results.append(
            ResultRow(
                request_id=r.request_id,
                model=r.model,
                model_version=r.model_version,
                status=r.status.value,
                priority=r.priority.value,
                outputs=r.outputs,
                error_code=r.error.code if r.error else None,
                error_message=r.error.message if r.error else None,
                queue_ms=r.latency_ms.queue,
                compute_ms=r.latency_ms.compute,
                total_ms=r.latency_ms.total,
                batch_id=o.batch_id,
                batch_size=r.batch_size,
                source_topic=src.topic,
                source_partition=src.partition,
                source_offset=src.offset,
                created_at=now,
            )
        )
        if o.drift is not None:
            output, expected = o.drift
            drift.append(
                DriftRow(
                    r.request_id, r.model, r.model_version, output, expected, output - expected, now
                )
            )
    return results, drift
