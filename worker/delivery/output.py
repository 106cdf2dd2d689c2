"""The output stage: the two producers, the completion queue, and the delivery from it
(results and dead letters to Kafka, then SQL with the offsets they complete, then the
commit), plus the streamed chunks of generative requests.

Two producers: aiokafka keeps one produce request in flight per broker, so a high
result sent by the bulk results' producer would wait for a bulk chunk's
acknowledgement, and take that one slot from the bulk chunks in turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from consumers.egress import Egress, OutRecord, Refused
from consumers.offsets import OffsetTracker, TopicPartitionKey
from consumers.topics import ensure_topics
from storage import ResultStore
from storage.write_process import WriterProcess
from worker.base.blocking import off_loop
from worker.base.pending import Outcome, Pending
from worker.base.steps import bounded
from worker.base.urgent_loop import urgent_context
from worker.delivery.chunks import ChunkPublisher
from worker.delivery.commits import Commit
from worker.delivery.completion import CompletionQueue
from worker.delivery.generated import Streams
from worker.delivery.sink import RowWriter, Sink
from worker.delivery.stage import Delivery
from worker.execution.generative.metrics import GenerationMetrics
from worker.models import Adapter
from worker.scheduling.yield_to_high import YieldToHigh
from worker.settings import WorkerSettings


class Output:
    """Takes its settings' ``topics``, ``kafka`` and ``sink`` sections."""

    def __init__(self, settings: WorkerSettings) -> None:
        assert settings.bootstrap is not None
        self._settings = settings
        self.tracker = OffsetTracker()  # started by intake, completed here: what may commit
        bootstrap, kafka, topics = settings.bootstrap, settings.kafka, settings.topics

        def egress(client_id: str, linger_ms: int) -> Egress:
            return Egress(
                bootstrap=bootstrap,
                client_id=client_id,
                linger_ms=linger_ms,
                max_request_bytes=kafka.max_request_bytes,
                metadata_timeout_s=kafka.metadata_timeout_ms / 1000,
                stable_topics=frozenset({topics.results, topics.dead_letters}),
                security=kafka.security,
            )

        self._egress = egress(kafka.client_id, kafka.linger_ms)
        self._urgent_egress = egress(f"{kafka.client_id}-urgent", 0)
        self._done = CompletionQueue()
        self._delivery: Delivery | None = None  # made in start(): it needs the database
        self._writer: WriterProcess | None = None
        self.streams: Streams | None = None  # likewise: it needs the producers

    def finish(self, outcomes: list[Outcome]) -> None:
        if outcomes:
            self._done.put(outcomes)

    async def publish(self, records: list[OutRecord]) -> list[Refused]:
        return await self._egress.publish(records)

    async def start(
        self,
        store: ResultStore,
        *,
        commit: Commit,
        on_durable: Callable[[Sequence[Outcome]], None],
        yield_to_high: YieldToHigh,
        adapter_for: Callable[[str], Adapter],
        generated: Callable[[Pending, Outcome], None],
        generation_metrics: GenerationMetrics,
    ) -> Streams:
        """Create the topics, start the producers; ``store`` takes the rows (through a
        child process with ``sink.write_process``), ``commit`` the offsets,
        ``on_durable`` each durable chunk, ``generated`` each generative request's end
        (``generation_metrics`` its first chunk's delay). Returns the streams of
        generative requests' chunks."""
        s = self._settings
        assert s.bootstrap is not None
        rows: RowWriter = store
        if s.sink.write_process:
            self._writer = WriterProcess(store, s.database_url, nice=s.sink.write_nice)
            await off_loop(self._writer.start)
            rows = self._writer
        sink = Sink(
            egress=self._egress,
            urgent_egress=self._urgent_egress,
            store=rows,
            results_topic=s.topics.results,
            dead_letter_topic=s.topics.dead_letters,
            group_id=s.kafka.group_id,
            max_value_bytes=s.kafka.max_message_bytes,
            config=s.sink,
        )
        self._delivery = Delivery(
            sink,
            self._done,
            self.tracker,
            commit=commit,
            commit_interval_s=s.kafka.commit_interval_ms / 1000,
            max_chunk=s.sink.max_chunk,
            on_durable=on_durable,
            yield_to_high=yield_to_high,
        )
        names = [*s.topics.lane_topics(), s.topics.results, s.topics.dead_letters]
        security = s.kafka.security
        await ensure_topics(s.bootstrap, names, partitions=s.topics.partitions, security=security)
        await self._egress.start()
        # Its sender task and connections inherit the context: they run urgent-first.
        await asyncio.create_task(self._urgent_egress.start(), context=urgent_context())
        chunks = ChunkPublisher(
            egress=self._egress,
            urgent_egress=self._urgent_egress,
            results_topic=s.topics.results,
            config=s.sink,
            metrics=generation_metrics,
        )
        self.streams = Streams(chunks, adapter_for, generated)
        return self.streams

    def tasks(self) -> list[asyncio.Task[None]]:
        assert self._delivery is not None, "start() first"
        return self._delivery.start()

    async def commit_now(self, then_forget: set[TopicPartitionKey]) -> None:
        if self._delivery is not None:
            await self._delivery.commit_now(then_forget=then_forget)

    async def settle(self, deadline: float) -> None:
        """After the stages' tasks are cancelled: the streamed chunks sent, a started SQL
        write ended, the durable offsets committed."""
        if self.streams is not None:
            await bounded(deadline, "the streamed chunks", self.streams.stop())
        if self._delivery is not None:
            await bounded(deadline, "the SQL write", self._delivery.finish_write())
            await bounded(deadline, "the offset commit", self._delivery.commit_now())

    async def stop(self, deadline: float) -> None:
        await bounded(deadline, "the producer", self._egress.stop())
        await bounded(deadline, "the urgent producer", self._urgent_egress.stop())
        if self._writer is not None:
            await bounded(deadline, "the SQL writer", off_loop(self._writer.close))
