"""``LabelJoiner``: consumes the labels topic and joins each label into the drift log.

A record is ``{"request_id": ..., "expected": ...}`` keyed by request id. A label whose
result is stored is joined at once; one that arrives first waits in SQL and is joined
when its result appears; after ``wait_s`` without one, it goes to the dead-letter topic
with the reason. Offsets are committed after the SQL write: a label may be read twice,
and the join is idempotent.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import orjson
from aiokafka import AIOKafkaConsumer, ConsumerRecord
from sqlalchemy import Engine

from consumers.egress import Egress, OutRecord
from consumers.errors import BadLabel, InferlaneError
from consumers.records import DeadLetter, SourceRef
from consumers.topics import ensure_topics
from storage import RowsRefused, StoreUnavailable
from storage.labels import (
    REJECTED,
    LabelRow,
    Pairing,
    expire_labels,
    join_labels,
    ready_labels,
)
from worker.base.blocking import off_loop
from worker.drift.metrics import DriftMetrics

log = logging.getLogger(__name__)

_SWEEP_S = 1.0  # how often waiting labels are matched against new results
_RETRY_S = 1.0


class UnmatchedLabel(InferlaneError):
    code = "label_unmatched"


def parse_label(value: bytes | None, source: SourceRef) -> LabelRow:
    """The label in a record's value, or ``BadLabel`` saying what is wrong."""
    try:
        data = orjson.loads(value or b"")
    except orjson.JSONDecodeError as exc:
        raise BadLabel(f"label is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise BadLabel("label must be a JSON object with request_id and expected")
    rid = data.get("request_id")
    if not isinstance(rid, str) or not 1 <= len(rid) <= 128:
        raise BadLabel("label request_id must be a string of 1-128 characters")
    if data.get("expected") is None:
        raise BadLabel("label has no expected value")
    text = (value or b"").decode()
    if "\\u0000" in text or "\x00" in text:  # PostgreSQL text cannot hold NUL
        raise BadLabel("label must not contain NUL characters")
    return LabelRow(rid, data["expected"], text, source.topic, source.partition, source.offset)


class LabelJoiner:
    def __init__(
        self,
        engine: Engine,
        *,
        bootstrap: str,
        topic: str,
        group_id: str,
        client_id: str,
        dead_letter_topic: str,
        max_request_bytes: int,
        partitions: int,
        window_s: int,
        wait_s: float,
        pair: Pairing,
        metrics: DriftMetrics,
    ) -> None:
        self._engine = engine
        self._bootstrap = bootstrap
        self._topic = topic
        self._dlq = dead_letter_topic
        self._partitions = partitions
        self._window_s = window_s
        self._wait_s = wait_s
        self._pair = pair
        self._metrics = metrics
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group_id,
            client_id=client_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        self._egress = Egress(
            bootstrap=bootstrap, client_id=client_id, linger_ms=2,
            max_request_bytes=max_request_bytes,
        )  # fmt: skip
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await ensure_topics(self._bootstrap, [self._topic], partitions=self._partitions)
        await self._egress.start()
        await self._consumer.start()
        self._consumer.subscribe([self._topic])
        self._task = asyncio.create_task(self._run(), name="inferlane-labels")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._consumer.stop()
        await self._egress.stop()

    async def _run(self) -> None:
        next_sweep = time.monotonic()
        while True:
            try:
                batches = await self._consumer.getmany(timeout_ms=200, max_records=1000)
                records = [m for messages in batches.values() for m in messages]
                if records:
                    handle = functools.partial(self._handle, records)
                    await self._publish(await self._until_stored(handle))
                    await self._consumer.commit()
                if time.monotonic() >= next_sweep:
                    next_sweep = time.monotonic() + _SWEEP_S
                    await self._publish(await self._until_stored(self._sweep))
            except Exception:  # the worker keeps serving; labels resume with the next fetch
                log.exception("labels: a step failed")
                await asyncio.sleep(_RETRY_S)

    async def _until_stored(self, step: Callable[[], list[DeadLetter]]) -> list[DeadLetter]:
        """Run ``step`` in a thread until the database takes it."""
        while True:
            try:
                return await off_loop(step)
            except StoreUnavailable as exc:
                log.warning("labels: database unavailable (%s); retrying", exc)
                await asyncio.sleep(_RETRY_S)

    async def _publish(self, dead: list[DeadLetter]) -> None:
        if dead:
            await self._egress.publish(
                [OutRecord(self._dlq, d.key, d.value, d.headers()) for d in dead]
            )

    def _handle(self, records: list[ConsumerRecord[bytes, bytes]]) -> list[DeadLetter]:
        labels, dead = [], []
        for m in records:
            source = SourceRef(m.topic, m.partition, m.offset)
            try:
                labels.append(parse_label(m.value, source))
            except BadLabel as exc:
                dead.append(DeadLetter(source, m.key, m.value, exc.code, exc.message))
                self._metrics.labels.labels("bad").inc()
        return dead + self._join(labels)

    def _sweep(self) -> list[DeadLetter]:
        dead = self._join(ready_labels(self._engine))
        before = datetime.now(UTC) - timedelta(seconds=self._wait_s)
        for label in expire_labels(self._engine, before):
            error = UnmatchedLabel(f"no result for this request id within {self._wait_s:g}s")
            dead.append(_dead_letter(label, error))
            self._metrics.labels.labels("dead_lettered").inc()
        return dead

    def _join(self, labels: list[LabelRow]) -> list[DeadLetter]:
        try:
            outcomes = join_labels(self._engine, labels, self._pair, self._window_s)
        except RowsRefused as exc:
            if len(labels) == 1:
                self._metrics.labels.labels("refused").inc()
                return [_dead_letter(labels[0], BadLabel(f"database refused it: {exc.reason}"))]
            # One at a time: only the labels the database refuses become dead letters.
            return [dead for label in labels for dead in self._join([label])]
        for outcome, n in Counter(o.outcome for o in outcomes).items():
            self._metrics.labels.labels(outcome).inc(n)
        return [
            _dead_letter(o.label, BadLabel(o.reason)) for o in outcomes if o.outcome == REJECTED
        ]


def _dead_letter(label: LabelRow, error: InferlaneError) -> DeadLetter:
    source = SourceRef(label.source_topic, label.source_partition, label.source_offset)
    return DeadLetter(
        source, label.request_id.encode(), label.value.encode(), error.code, error.message
    )
