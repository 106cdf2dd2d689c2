"""Streamed chunks of generative requests, to Kafka as they are produced.

Each chunk is a ``StreamChunk`` record keyed by its request id, on the topic the
request's result goes to (its ``reply_to`` or the results topic), so it lands on the
result's partition, before the result: the worker hands a request's result to the
sink only after its chunks are acknowledged (``flushed``). Chunks queue on the event
loop and leave in one ``Egress.publish`` per lane and round, at once (no linger),
high-lane ones through the urgent producer. A chunk is at least once like a result;
transient broker failures are retried with backoff, and a chunk the broker refuses for
good (a ``reply_to`` it will not take) is logged and dropped: the result still says how
the request ended.
When a request's first chunk has left, its delay since the first token is observed.
"""

from __future__ import annotations

import asyncio
import logging
import time

from aiokafka.errors import KafkaError

from consumers.contract import Priority, StreamChunk
from consumers.egress import Egress, OutRecord
from worker.base.backoff import until_done
from worker.base.pending import Pending
from worker.execution.generative.metrics import GenerationMetrics
from worker.execution.generative.text_stream import Chunk
from worker.settings import SinkConfig

log = logging.getLogger(__name__)


class ChunkPublisher:
    def __init__(
        self,
        *,
        egress: Egress,
        urgent_egress: Egress,
        results_topic: str,
        config: SinkConfig,
        metrics: GenerationMetrics,
    ) -> None:
        self._egresses = {False: egress, True: urgent_egress}
        self._results_topic = results_topic
        self._config = config
        self._metrics = metrics
        self._queued: dict[bool, list[OutRecord]] = {False: [], True: []}
        # Of the queued records, the first chunks: (model, first token's time) each.
        self._firsts: dict[bool, list[tuple[str, float]]] = {False: [], True: []}
        self._queued_total = {False: 0, True: 0}  # records ever queued, per producer
        self._sent_total = {False: 0, True: 0}  # of them, published (or given up on)
        self._last: dict[str, tuple[bool, int]] = {}  # request id -> its last record's number
        self._flushers: dict[bool, asyncio.Task[None]] = {}
        self._sent = asyncio.Condition()

    def add(self, pending: Pending, chunk: Chunk, first_token_s: float) -> None:
        """Queue ``chunk`` of ``pending``'s text (on the event loop); ``first_token_s``:
        when its first token was computed (monotonic)."""
        request = pending.request
        record = StreamChunk(
            request_id=request.request_id,
            model=request.model,
            seq=chunk.seq,
            text=chunk.text,
            tokens=chunk.tokens,
        )
        urgent = pending.lane == Priority.HIGH
        topic = request.reply_to or self._results_topic
        key = request.request_id.encode()
        self._queued[urgent].append(OutRecord(topic, key, record.model_dump_json().encode()))
        if chunk.seq == 0:
            self._firsts[urgent].append((request.model, first_token_s))
        self._queued_total[urgent] += 1
        self._last[request.request_id] = (urgent, self._queued_total[urgent])
        flusher = self._flushers.get(urgent)
        if flusher is None or flusher.done():
            self._flushers[urgent] = asyncio.create_task(
                self._flush(urgent), name=f"inferlane-chunks{'-urgent' if urgent else ''}"
            )

    async def flushed(self, request_id: str) -> None:
        """Until every chunk queued for ``request_id`` has left."""
        last = self._last.pop(request_id, None)
        if last is None:
            return
        urgent, number = last
        async with self._sent:
            await self._sent.wait_for(lambda: self._sent_total[urgent] >= number)

    async def stop(self) -> None:
        for task in self._flushers.values():
            task.cancel()
        await asyncio.gather(*self._flushers.values(), return_exceptions=True)

    async def _flush(self, urgent: bool) -> None:
        while self._queued[urgent]:
            records, self._queued[urgent] = self._queued[urgent], []
            firsts, self._firsts[urgent] = self._firsts[urgent], []
            await self._publish(records, urgent)
            self._metrics.first_chunks(firsts, time.monotonic())
            async with self._sent:
                self._sent_total[urgent] += len(records)
                self._sent.notify_all()

    async def _publish(self, records: list[OutRecord], urgent: bool) -> None:
        egress = self._egresses[urgent]
        refused = await until_done(
            "kafka (chunks)",
            lambda: egress.publish(records, at_once=True),
            self._config.backoff,
            (KafkaError, TimeoutError, OSError),
            log,
        )
        for refusal in refused:
            log.warning("broker refused a chunk on %s: %s", refusal.record.topic, refusal.reason)
