"""A worker's share of distributed jobs: chunk descriptors from the jobs topic, claimed
in SQL and scored one at a time below live traffic.

The worker's group reads the jobs topic as a consumer group of its own (``GROUP.jobs``),
so Kafka spreads the descriptors over the workers. For each one, the worker claims the
chunk in SQL (``storage.job_chunks``) and scores it on its chunk thread; the offset is
committed once the chunk is done, failed, or not this worker's to run (done already,
or held by a live worker). A worker with nothing on its partitions takes pending chunks
straight from SQL, and running ones whose holder stopped beating: a dead worker's chunk
is taken over from its checkpoint, whatever Kafka's rebalance does with its partitions.

Live traffic keeps its priority: the chunk thread runs at the low lane's nice value
(the OS gives the cores to the lanes above it), and before each forward pass it waits
while high requests wait for their batch (``YieldToHigh``), as the low lane's compute
threads do. Its SQL writes and file reads run on that thread too, off the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from collections.abc import Awaitable, Callable

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaError
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from consumers.egress import OutRecord, Refused
from consumers.errors import BadRecord
from consumers.records import DeadLetter, SourceRef
from consumers.topics import ensure_topics
from storage import ResultStore
from storage.job_chunks import Claim
from storage.jobs import HEARTBEAT_S
from worker.base.blocking import off_loop, one_thread_pool
from worker.base.metric_set import MetricSet, counter
from worker.execution.aside import Submit
from worker.execution.executor import lower_priority
from worker.jobs.chunk_run import ChunkRunner
from worker.jobs.chunks import ChunkDescriptor
from worker.jobs.liveness import reason_of
from worker.models import ModelRegistry
from worker.settings import WorkerSettings

log = logging.getLogger(__name__)

_POLL_MS = 1000  # an empty poll this long: look in SQL for chunks to take
# A chunk runs between two polls of its consumer: far above any chunk's time, so that a
# long chunk never costs the worker its place in the group.
_MAX_POLL_INTERVAL_MS = 3_600_000

Publish = Callable[[list[OutRecord]], Awaitable[list[Refused]]]


class ChunkMetrics(MetricSet):
    chunks = counter(
        "inferlane_job_chunks",
        "Distributed job chunks this worker ran: done (its last window committed), "
        "stopped (taken over, job cancelled, worker stopping) or failed (it raised)",
        "outcome",
    )


class ChunkService:
    """``start()`` on the worker's loop, ``stop()`` before the store closes."""

    def __init__(
        self,
        settings: WorkerSettings,
        registry: ModelRegistry,
        store: ResultStore,
        *,
        publish: Publish,
        submit: Submit,
        metrics: CollectorRegistry | None = None,
    ) -> None:
        assert settings.bootstrap is not None and settings.topics.jobs is not None
        self._settings = settings
        self._topic = settings.topics.jobs
        self._publish = publish
        self._runner = ChunkRunner(registry, store, submit)
        self._me = f"{socket.gethostname()}:{os.getpid()}"
        self._pool = one_thread_pool("job-chunk")
        self._niced = False  # the pool's thread runs at the low lane's nice value
        kafka = settings.kafka
        self._consumer = AIOKafkaConsumer(
            self._topic,
            bootstrap_servers=settings.bootstrap,
            group_id=f"{kafka.group_id}.jobs",
            client_id=f"{kafka.client_id}-jobs",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=kafka.session_timeout_ms,
            max_poll_interval_ms=_MAX_POLL_INTERVAL_MS,
            **kafka.security.aiokafka_kwargs(),
        )
        self._task: asyncio.Task[None] | None = None
        self._holding: Claim | None = None  # the chunk under way
        self._next_look_s = 0.0
        self._metrics = ChunkMetrics(metrics)

    async def start(self) -> None:
        s = self._settings
        assert s.bootstrap is not None
        await ensure_topics(
            s.bootstrap, [self._topic], partitions=s.topics.partitions, security=s.kafka.security
        )
        await self._consumer.start()
        self._task = asyncio.create_task(self._loop(), name="inferlane-job-chunks")

    async def stop(self) -> None:
        """The chunk under way stops after its window in progress and is released, so
        another worker takes it over at once from its checkpoint."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await off_loop(self._pool.shutdown)
        if self._holding is not None:
            await off_loop(self._runner.chunks.release, self._holding)
        await self._consumer.stop()

    async def _loop(self) -> None:
        while True:
            fetched = await self._consumer.getmany(timeout_ms=_POLL_MS, max_records=1)
            if not fetched:
                await self._take()
                continue
            for tp, records in fetched.items():
                for record in records:
                    await self._handle(record)
                    await self._commit(tp, record.offset + 1)

    async def _handle(self, record: ConsumerRecord[bytes, bytes]) -> None:
        try:
            descriptor = ChunkDescriptor.model_validate_json(record.value or b"")
        except ValidationError as exc:
            await self._dead_letter(record, f"not a chunk descriptor: {exc}")
            return
        claim = await off_loop(
            self._runner.chunks.claim, descriptor.job, descriptor.chunk, self._me
        )
        if claim is not None:  # else done, failed, or held by a live worker
            await self._run(claim)

    async def _take(self) -> None:
        """Nothing on this worker's partitions: a pending chunk, or one whose holder is
        gone, straight from SQL."""
        if time.monotonic() < self._next_look_s:
            return
        self._next_look_s = time.monotonic() + _POLL_MS / 1000
        chunks = self._runner.chunks
        for job, chunk in await off_loop(chunks.takeable):
            claim = await off_loop(chunks.claim, job, chunk, self._me)
            if claim is not None:
                await self._run(claim)
                return

    async def _run(self, claim: Claim) -> None:
        """Score the chunk on the chunk thread while the loop beats for its claim."""
        stop = threading.Event()
        beat = asyncio.create_task(self._beat(claim, stop))
        loop = asyncio.get_running_loop()
        self._holding = claim
        try:
            finished = await asyncio.shield(
                loop.run_in_executor(self._pool, self._score, claim, stop)
            )
        except asyncio.CancelledError:  # the worker stops: the chunk ends after its window
            stop.set()
            raise
        except Exception as exc:
            reason = reason_of(exc)
            log.warning("job %s chunk %d failed: %s", claim.job, claim.chunk, reason)
            self._metrics.chunks.labels("failed").inc()
            await off_loop(self._runner.chunks.fail, claim, reason)
        else:
            self._metrics.chunks.labels("done" if finished else "stopped").inc()
        finally:
            beat.cancel()
        self._holding = None

    def _score(self, claim: Claim, stop: threading.Event) -> bool:
        """On the chunk thread: below the live lanes from its first chunk on."""
        if not self._niced:
            lower_priority(self._settings.compute.low_nice)
            self._niced = True
        return self._runner.run(claim, stop)

    async def _beat(self, claim: Claim, stop: threading.Event) -> None:
        while not stop.is_set():
            await asyncio.sleep(HEARTBEAT_S)
            try:
                held = await off_loop(self._runner.chunks.heartbeat, claim)
            except Exception as exc:  # the chunk's own writes will meet the same outage
                log.warning(
                    "job %s chunk %d: heartbeat not written: %s", claim.job, claim.chunk, exc
                )
                continue
            if not held:  # taken over, or the job stopped: end at the next window
                stop.set()

    async def _commit(self, tp: TopicPartition, offset: int) -> None:
        try:
            await self._consumer.commit({tp: offset})
        except KafkaError as exc:  # revoked meanwhile: its next owner skips what is done
            log.info("jobs topic: offset %d of %s not committed: %s", offset, tp, exc)

    async def _dead_letter(self, record: ConsumerRecord[bytes, bytes], reason: str) -> None:
        source = SourceRef(record.topic, record.partition, record.offset)
        letter = DeadLetter(source, record.key, record.value, BadRecord.code, reason)
        dead = self._settings.topics.dead_letters
        await self._publish([OutRecord(dead, record.key, record.value, letter.headers())])
