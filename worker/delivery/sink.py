"""The sink makes a chunk of outcomes durable, in the order the contract needs.

1. Kafka: results (to the results topic or the request's ``reply_to``) and dead
   letters, all acknowledged. A crash after this replays the chunk: Kafka results
   are at-least-once by contract.
2. SQL, one transaction: results upserted by request id, drift rows, and the
   consumed offsets these outcomes complete. Exactly once per request id.
The caller runs the steps in this order for every outcome, and commits the Kafka
offsets after ``persist`` returns.

Transient failures (broker or database down) are retried with backoff, forever:
nothing is dropped, and backpressure pauses intake meanwhile. A failure that a retry
cannot cure stays with the request that caused it: a record the broker refuses is
sent in a smaller form (see ``worker.delivery.refusals``), and a row the database refuses is
found by bisecting the chunk and dead-lettered with the database's reason, while the
rest of the chunk commits.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Protocol, TypeVar

from aiokafka.errors import KafkaError

from consumers.egress import Egress, OutRecord, Refused
from consumers.offsets import TopicPartitionKey
from consumers.records import DeadLetter
from storage import (
    DriftRow,
    GenerationRow,
    OffsetRow,
    ResultRow,
    RowsRefused,
    StoreUnavailable,
)
from worker.base.backoff import until_done
from worker.base.blocking import off_loop
from worker.base.pending import Outcome
from worker.delivery.refusals import Refusals
from worker.settings import SinkConfig

log = logging.getLogger(__name__)

# Broker or database down: retried, with backoff, until it is back.
_TRANSIENT = (KafkaError, StoreUnavailable, TimeoutError, OSError)

T = TypeVar("T")

# Chunks this small are serialized (here) and urgent fetches this small admitted (the
# service) on the event loop: a thread hop there and back costs more.
INLINE_RECORDS = 8


class RowWriter(Protocol):
    """``storage.ResultStore`` or ``storage.write_process.WriterProcess``: one blocking
    transaction per call, raising ``StoreUnavailable`` or ``RowsRefused``."""

    def write(
        self,
        results: Sequence[ResultRow],
        drift: Sequence[DriftRow],
        offsets: Sequence[OffsetRow],
        *,
        generations: Sequence[GenerationRow] = (),
    ) -> None: ...


class Sink:
    def __init__(
        self,
        *,
        egress: Egress,
        urgent_egress: Egress | None = None,
        store: RowWriter,
        results_topic: str,
        dead_letter_topic: str,
        group_id: str,
        max_value_bytes: int,
        config: SinkConfig,
    ) -> None:
        # Outcomes published with urgent=True go through urgent_egress (its own producer).
        self._egresses = {False: egress, True: urgent_egress or egress}
        self._store = store
        self._group_id = group_id
        self._config = config
        self._refusals = Refusals(
            results_topic=results_topic,
            dead_letter_topic=dead_letter_topic,
            max_value_bytes=max_value_bytes,
        )

    async def publish(self, outcomes: Sequence[Outcome], *, urgent: bool = False) -> None:
        """Step 1: every result and dead letter acknowledged by Kafka (or refused for good
        in every form it can take, which is logged); ``urgent`` outcomes by the urgent
        producer."""
        # Serializing every result is per-record work: keep a chunk off the event loop,
        # unless it is a few records (a high lane's), which wait less on the loop than
        # for a pool thread.
        if len(outcomes) <= INLINE_RECORDS:
            records = self._refusals.records(outcomes)
        else:
            records = await off_loop(self._refusals.records, outcomes)
        await self._send(records, urgent)

    async def _send(self, records: list[tuple[OutRecord, Outcome]], urgent: bool) -> None:
        while records:
            owners = {id(r): o for r, o in records}
            refused = await self._publish_once([r for r, _ in records], urgent)
            records = []
            for refusal in refused:
                outcome = owners[id(refusal.record)]
                smaller = self._refusals.fallback(refusal, outcome)
                if smaller is None:
                    log.error(
                        "broker refused %s for %s in every form: %s",
                        refusal.record.topic,
                        _request_id(outcome),
                        refusal.reason,
                    )
                else:
                    records.extend((r, outcome) for r in smaller)

    async def _publish_once(self, records: list[OutRecord], urgent: bool) -> list[Refused]:
        egress = self._egresses[urgent]
        return await self._retry("kafka", lambda: egress.publish(records))

    async def persist(
        self, outcomes: Sequence[Outcome], offsets: dict[TopicPartitionKey, int]
    ) -> None:
        """Step 2, for outcomes already published: one SQL transaction, unless the
        database refuses a row; then each refused row is dead-lettered, the others
        are written, and the offsets follow in a transaction of their own."""
        positions = [OffsetRow(self._group_id, t, p, o) for (t, p), o in offsets.items()]
        try:
            await self._write(outcomes, positions)
            return
        except RowsRefused:
            pass
        refused = await self._isolate(list(outcomes))
        letters: list[tuple[OutRecord, Outcome]] = []
        for outcome, reason in refused:
            log.warning("database refused the row of %s: %s", _request_id(outcome), reason)
            src = outcome.record
            letter = DeadLetter(src.source, src.key, src.value, RowsRefused.code, reason)
            outcome.dead_letter = outcome.dead_letter or letter
            letters.append((self._refusals.dead_letter(letter), outcome))
        await self._send(letters, urgent=False)
        await self._write([], positions)

    async def _isolate(self, outcomes: list[Outcome]) -> list[tuple[Outcome, str]]:
        """Write what the database takes; return the outcomes it refuses on their own."""
        try:
            await self._write(outcomes, [])
            return []
        except RowsRefused as exc:
            if len(outcomes) == 1:
                return [(outcomes[0], exc.reason)]
        mid = len(outcomes) // 2
        return await self._isolate(outcomes[:mid]) + await self._isolate(outcomes[mid:])

    async def _write(self, outcomes: Sequence[Outcome], positions: list[OffsetRow]) -> None:
        await self._retry("database", lambda: off_loop(self._write_rows, outcomes, positions))

    def _write_rows(self, outcomes: Sequence[Outcome], positions: list[OffsetRow]) -> None:
        # Runs in a thread: building the rows is per-record work too.
        results, drift, generations = _rows(outcomes)
        self._store.write(results, drift, positions, generations=generations)

    async def _retry(self, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
        return await until_done(what, attempt, self._config.backoff, _TRANSIENT, log)


def _request_id(outcome: Outcome) -> str:
    if outcome.result is not None:
        return f"request {outcome.result.request_id!r}"
    return f"record {tuple(outcome.record.source)}"


def _rows(
    outcomes: Sequence[Outcome],
) -> tuple[list[ResultRow], list[DriftRow], list[GenerationRow]]:
    now = datetime.now(UTC)
    results, drift, generations = [], [], []
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
            output, expected, error = o.drift
            drift.append(
                DriftRow(r.request_id, r.model, r.model_version, output, expected, error, now)
            )
        g = o.generation
        if g is not None:
            generations.append(
                GenerationRow(
                    r.request_id,
                    r.model,
                    r.model_version,
                    g.text,
                    g.finish_reason,
                    g.prompt_tokens,
                    g.generated_tokens,
                    g.ttft_ms,
                    g.tpot_ms,
                    g.exact_match,
                    g.f1,
                    now,
                )
            )
    return results, drift, generations
