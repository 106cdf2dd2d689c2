"""The intake stage: records from Kafka into the lanes, or to a generative engine.

Two tasks on the event loop (the high topic's reader has its own, so a high record never
waits for a bulk fetch or its admission): fetch, admit (off the loop, unless it is a few
urgent records), push. After each step, and whenever outcomes become durable, topics
pause where lanes or the in-flight budget are full. On assignment it seeks to where SQL
says the results are durable; on revocation it hands back what has not started and
waits, bounded, for what has.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence

from consumers.contract import Priority
from consumers.ingress import Ingress
from consumers.offsets import OffsetTracker, TopicPartitionKey
from consumers.records import RawRecord
from storage import ResultStore
from worker.base.blocking import off_loop
from worker.base.pending import Outcome, Pending
from worker.base.steps import STEP_GRACE_S, bounded
from worker.base.urgent_loop import urgent_context
from worker.delivery.sink import INLINE_RECORDS
from worker.execution.generative.stage import GenerationStage, SequenceEvents
from worker.intake.admission import Admission
from worker.intake.backpressure import bulk_fetches_slow, bulk_room, paused_topics
from worker.intake.inflight import InFlight
from worker.models import ModelRegistry
from worker.ops.metrics import WorkerMetrics
from worker.scheduling.lanes import Lanes
from worker.scheduling.yield_to_high import YieldToHigh
from worker.settings import WorkerSettings

_FETCH_TIMEOUT_MS = 100

CommitNow = Callable[[set[TopicPartitionKey]], Awaitable[None]]


class Intake:
    """Takes its settings' ``kafka``, ``topics``, ``lanes`` and ``scheduling`` sections."""

    def __init__(
        self,
        settings: WorkerSettings,
        registry: ModelRegistry,
        lanes: Lanes,
        tracker: OffsetTracker,
        *,
        route: Callable[[str, str], str],
        generation: GenerationStage,
        yield_to_high: YieldToHigh,
        metrics: WorkerMetrics,
        finish: Callable[[list[Outcome]], None],
        wake: Callable[[], None],
    ) -> None:
        assert settings.bootstrap is not None
        topics, self._config = settings.topics, settings.lanes
        self._registry, self._lanes, self._generation = registry, lanes, generation
        self._yield, self._metrics, self._finish, self._wake = yield_to_high, metrics, finish, wake
        self._lane_of_topic = topics.lane_topics()
        self._admission = Admission(
            adapter_for=registry.adapter,
            lane_of_topic=self._lane_of_topic,
            max_bytes=settings.kafka.max_message_bytes,
            reply_to_allowed=topics.reply_to_allowed,
            lane_timeouts_ms=settings.scheduling.lane_timeouts_ms(),
            route=route,
        )
        self._ingress = Ingress(
            settings.bootstrap,
            settings.kafka,
            topics=list(self._lane_of_topic),
            # One FIFO lane takes records as they come, whatever their topic.
            urgent_topics=set() if lanes.single_lane else {topics.high},
        )
        self._group_id = settings.kafka.group_id
        self._tracker = tracker
        self.in_flight = InFlight(
            max_records=self._config.max_in_flight, max_bytes=self._config.max_in_flight_bytes
        )
        self._progress = asyncio.Event()  # something became durable or was handed back
        self._accepting = True
        # A rebalance waits for the chunk being admitted; the urgent topics' intake has
        # its own lock, so a high record never waits for a bulk chunk's admission.
        self._locks = {False: asyncio.Lock(), True: asyncio.Lock()}
        self._store: ResultStore | None = None
        self._events: SequenceEvents | None = None
        self._commit_now: CommitNow | None = None

    @property
    def commit(self) -> Callable[[dict[TopicPartitionKey, int]], Awaitable[None]]:
        return self._ingress.commit

    async def start(
        self, store: ResultStore, events: SequenceEvents, commit_now: CommitNow
    ) -> None:
        """Join the group: ``store`` says where each partition resumes, ``events`` takes
        generative requests' sequences, ``commit_now`` commits before partitions go."""
        self._store, self._events, self._commit_now = store, events, commit_now
        await self._ingress.start(
            self._on_assigned, self._on_revoked, urgent_context=urgent_context()
        )

    def tasks(self) -> list[asyncio.Task[None]]:
        tasks = [asyncio.create_task(self._run(urgent=False), name="inferlane-intake")]
        if self._ingress.has_urgent:
            run = self._run(urgent=True)
            name = "inferlane-intake-urgent"
            tasks.append(asyncio.create_task(run, name=name, context=urgent_context()))
        return tasks

    def stop_accepting(self) -> None:
        self._accepting = False

    async def stop(self) -> None:
        await self._ingress.stop()

    # -- what the status page and /metrics read -----------------------------------------

    @property
    def assignment(self) -> set[TopicPartitionKey]:
        """The partitions this worker consumes now (empty before the group join)."""
        return self._ingress.assignment()

    def lane_depths(self) -> dict[str, int]:
        return {lane.priority.value: len(lane) for lane in self._lanes}

    def in_flight_bytes(self) -> int:
        return self.in_flight.bytes

    def paused_partitions(self) -> set[TopicPartitionKey]:
        return self._ingress.paused()

    async def consumer_lag(self) -> dict[TopicPartitionKey, int]:
        return await self._ingress.lag()

    # -- the flow ------------------------------------------------------------------------

    async def _run(self, *, urgent: bool) -> None:
        while self._accepting:
            revocations = self._ingress.revocations
            room = None if urgent else self._bulk_room()
            records = await self._ingress.fetch(_FETCH_TIMEOUT_MS, urgent=urgent, max_records=room)
            if records and not urgent:
                await self._yield.held()
            if records:
                async with self._locks[urgent]:
                    if self._ingress.revocations != revocations:  # some may be gone
                        assigned = self._ingress.assignment()
                        records = [
                            r for r in records if (r.source.topic, r.source.partition) in assigned
                        ]
                    if records:
                        await self._admit(records, urgent=urgent)
            self.apply_backpressure()

    async def _admit(self, records: list[RawRecord], *, urgent: bool) -> None:
        for r in records:
            self._tracker.started((r.source.topic, r.source.partition), r.source.offset)
        self.in_flight.add(records)
        self._metrics.consumed(Counter(r.source.topic for r in records))
        # Two thread hops cost more than a few records' admission, unless it would build
        # an adapter (a model not warmed at start: a candidate, a reloaded registry).
        if urgent and len(records) <= INLINE_RECORDS and self._registry.adapters_built():
            admitted = self._admission.admit(records)
        else:
            admitted = await off_loop(self._admission.admit, records)
        # Each high request's result leaves on the urgent stream, rejected ones' too;
        # those bound for a lane also wait for a compute thread (counted before the push).
        events = self._events
        generated: list[Pending] = []
        to_lanes: list[Pending] = []
        for pending in admitted.pending:
            serves = events is not None and self._generation.serves(pending)
            (generated if serves else to_lanes).append(pending)
        ended = [o.result for o in admitted.ended if o.result is not None]
        self._yield.arrived(
            sum(p.lane == Priority.HIGH for p in admitted.pending)
            + sum(r.priority == Priority.HIGH for r in ended),
            sum(p.lane == Priority.HIGH for p in to_lanes),
        )
        if events is not None:
            for pending in generated:
                self._generation.submit(pending, events)
        for pending in to_lanes:
            self._lanes.push(pending)
        self._finish(admitted.ended)
        self._wake()

    def _bulk_room(self) -> int:
        single = self._lanes.single_lane
        return bulk_room(self.in_flight, high_reserve=self._config.high_reserve, single_lane=single)

    def apply_backpressure(self) -> None:
        self._metrics.in_flight.set(len(self.in_flight))
        self._metrics.queued.set(len(self._lanes))
        paused = paused_topics(
            self._lane_of_topic,
            self._lanes,
            load=self.in_flight.load,
            high_reserve=self._config.high_reserve,
        )
        self._ingress.set_paused(paused)
        if self._ingress.has_urgent:  # else the same consumer reads the high topic
            self._ingress.pace_bulk(
                bulk_fetches_slow(self._lane_of_topic, self._lanes, paused, now_s=time.monotonic())
            )

    def durable(self, chunk: Sequence[Outcome]) -> None:
        """Delivery made ``chunk`` durable: its records leave the budget."""
        self._metrics.delivered(chunk)
        self.in_flight.remove(o.record for o in chunk)
        self._progress.set()
        self.apply_backpressure()

    async def settled(self) -> None:
        """Until every consumed record is durable and the lanes are empty."""
        await self._until(lambda: len(self.in_flight) == 0 and not len(self._lanes))

    async def _until(self, done: Callable[[], bool]) -> None:
        while not done():
            self._progress.clear()
            await self._progress.wait()

    # -- rebalance -----------------------------------------------------------------------

    async def _on_assigned(self, assigned: set[TopicPartitionKey]) -> None:
        """Resume where SQL says the durable results end, whatever Kafka's commit says:
        behind it (a commit that failed) or ahead of it (SQLite lost its last commits in
        a power loss). Upserts make the replay harmless."""
        assert self._store is not None
        stored = await off_loop(self._store.committed_offsets, self._group_id)
        for tp in assigned:
            durable = stored.get(tp)
            if durable is not None:
                self._ingress.seek(tp, durable)
        self.apply_backpressure()

    async def _on_revoked(self, revoked: set[TopicPartitionKey]) -> None:
        """Hand back what has not started; finish what has, so its offsets commit.

        The wait covers the revoked partitions' started work only (a few batches and
        sink chunks), bounded by ``lanes.rebalance_drain_s``.
        """
        async with self._locks[False], self._locks[True]:
            dropped = self._lanes.remove_if(
                lambda p: (p.record.source.topic, p.record.source.partition) in revoked
            )
            self.in_flight.remove(p.record for p in dropped)
            self._progress.set()  # a stop() waiting to settle may be done now
            if self._accepting:  # on shutdown, stop() has drained (or chosen not to)
                deadline = time.monotonic() + self._config.rebalance_drain_s
                done = self._until(lambda: self.in_flight.count_in(revoked) == 0)
                await bounded(deadline, "the revoked partitions' work", done)
            if self._commit_now is not None:
                commit = self._commit_now(revoked)
                await bounded(time.monotonic() + STEP_GRACE_S, "the offset commit", commit)
            self._tracker.forget(revoked)
