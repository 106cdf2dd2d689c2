"""The worker: a facade that takes input, schedules, executes and completes.

Its tasks on one event loop, each a short sentence:
- intake: fetch records, admit them (off the loop), queue them in lanes;
- schedule: ask the batcher for a batch whenever the executor has room, submit it;
- deliver (``worker.delivery.stage``): publish finished outcomes to Kafka, high lane first,
  write them to SQL with the offsets they complete, then commit to Kafka.
Forward passes and SQL writes run in threads, so the Kafka group keeps its heartbeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Sequence
from types import TracebackType

import torch
from prometheus_client import CollectorRegistry

from consumers.contract import Priority
from consumers.egress import Egress
from consumers.ingress import Ingress
from consumers.offsets import OffsetTracker, TopicPartitionKey
from consumers.records import RawRecord
from consumers.topics import ensure_topics
from storage import ResultStore
from storage.write_process import WriterProcess
from worker.base.blocking import off_loop
from worker.base.pending import Batch, BatchRun, Outcome, Pending
from worker.delivery.chunks import ChunkPublisher
from worker.delivery.completion import CompletionQueue
from worker.delivery.generated import Streams
from worker.delivery.outcomes import completed, expired
from worker.delivery.sink import INLINE_RECORDS, Sink
from worker.delivery.stage import Delivery
from worker.drift.runtime import Drift
from worker.execution.cuda_lanes import CudaLaneExecutor
from worker.execution.executor import Executor, ThreadExecutor
from worker.execution.gc_schedule import GcSchedule
from worker.execution.generative.stage import GenerationStage
from worker.intake.admission import Admission
from worker.intake.backpressure import bulk_fetches_slow, bulk_room, paused_topics
from worker.intake.inflight import InFlight
from worker.jobs.chunk_service import ChunkService
from worker.models import ModelRegistry
from worker.ops.http import OpsServer
from worker.ops.metrics import WorkerMetrics
from worker.rollout.routing import Router
from worker.rollout.runtime import Rollouts
from worker.scheduling.batcher import Batcher
from worker.scheduling.lanes import LANE_ORDER, Lanes, lane_of
from worker.scheduling.scheduler import Scheduler
from worker.scheduling.yield_to_high import YieldToHigh
from worker.settings import ComputeConfig, WorkerSettings

log = logging.getLogger(__name__)

_FETCH_TIMEOUT_MS = 100
# Each shutdown step gets at least this long, even when draining used up the timeout.
_STEP_GRACE_S = 1.0


class Worker:
    """``async with Worker(settings, registry) as w: await w.wait()``; or ``run(stop)``."""

    def __init__(
        self,
        settings: WorkerSettings,
        registry: ModelRegistry,
        *,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        if settings.bootstrap is None:
            raise ValueError("settings.bootstrap is required (the CLI starts a broker if unset)")
        self.settings = settings
        self.metrics = metrics or WorkerMetrics()
        self._registry = registry
        registry.configure(settings.model_store, self.metrics.registry)
        self.metrics.label_models(registry.knows)  # made-up names share one label
        self._store: ResultStore | None = None
        self._writer: WriterProcess | None = None
        self._lanes = Lanes(settings.lanes.capacity, single_lane=settings.lanes.single_lane)
        # Bulk work waits while high requests are in the worker (one FIFO lane: never).
        share = None if settings.lanes.single_lane else settings.scheduling.yield_share
        self._yield = YieldToHigh(share, metrics=self.metrics.registry)
        self._executor = choose_executor(
            registry, settings.compute, self.metrics.registry, self._yield
        )
        # A backend that preempts needs no slices, and riders would only lengthen a
        # higher lane's batch: the lower lane's own thread serves them.
        preempts = self._executor.preempts
        self._scheduler = Scheduler(
            settings.scheduling,
            registry,
            self._lanes,
            max_batch=settings.batching.max_batch,
            metrics=self.metrics.registry,
            slices=not preempts,
            lanes_apart=self._executor.lanes_apart,
        )
        self._batcher = Batcher(
            self._lanes,
            max_wait_s=settings.batching.max_wait_s,
            limit=self._batch_limit,
            grouped=lambda model: registry.adapter(model).variable_cost,
            max_cost=self._scheduler.max_cost,
            shares=self._scheduler.shares,
            resident=registry.on_device,
            patience_s=settings.batching.swap_patience_s,
            riders=not preempts,
        )
        # Generative models run on their engines, which apply the lanes at every step.
        self._generation = GenerationStage(registry, settings.scheduling.lane_shares())
        self._streams: Streams | None = None  # made in start(): it needs the producers
        self._tracker = OffsetTracker()
        topics, kafka = settings.topics, settings.kafka
        self._lane_of_topic = topics.lane_topics()
        self._router = Router()  # rollouts send a share of a model's requests to a candidate
        self._admission = Admission(
            adapter_for=registry.adapter,
            lane_of_topic=self._lane_of_topic,
            max_bytes=kafka.max_message_bytes,
            reply_to_allowed=topics.reply_to_allowed,
            lane_timeouts_ms=settings.scheduling.lane_timeouts_ms(),
            route=self._router.route,
        )
        self._ingress = Ingress(
            bootstrap=settings.bootstrap,
            topics=list(self._lane_of_topic),
            # The FIFO baseline takes records as they come, whatever their topic.
            urgent_topics=set() if settings.lanes.single_lane else {topics.high},
            group_id=kafka.group_id,
            client_id=kafka.client_id,
            max_records=kafka.fetch_max_records,
            max_wait_ms=kafka.fetch_max_wait_ms,
            urgent_max_wait_ms=kafka.urgent_fetch_max_wait_ms,
            busy_max_wait_ms=kafka.busy_fetch_max_wait_ms,
            quiet_max_wait_ms=kafka.quiet_urgent_fetch_max_wait_ms,
            max_message_bytes=kafka.max_message_bytes,
            session_timeout_ms=kafka.session_timeout_ms,
            security=kafka.security,
        )

        bootstrap = settings.bootstrap  # narrowed above; a closure would lose that

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

        # Two producers: aiokafka keeps one produce request in flight per broker, so a
        # high result sent by the bulk results' producer would wait for a bulk chunk's
        # acknowledgement, and take that one slot from the bulk chunks in turn.
        self._egress = egress(kafka.client_id, kafka.linger_ms)
        self._urgent_egress = egress(f"{kafka.client_id}-urgent", 0)
        self._done = CompletionQueue()
        self._delivery: Delivery | None = None  # made in start(): it needs the database
        self._wake = asyncio.Event()  # new requests or a free executor slot
        # A rebalance waits for the chunk being admitted; the urgent topics' intake has
        # its own lock, so a high record never waits for a bulk chunk's admission.
        self._intake_locks = {False: asyncio.Lock(), True: asyncio.Lock()}
        self._running: Counter[Priority] = Counter()  # batches in the executor, by lane
        self._in_flight = InFlight(
            max_records=settings.lanes.max_in_flight, max_bytes=settings.lanes.max_in_flight_bytes
        )
        self._progress = asyncio.Event()  # something became durable or was handed back
        self._accepting = True
        self._closed = False  # stages cancelled: nothing more may start
        self._tasks: list[asyncio.Task[None]] = []
        self._failed: asyncio.Future[None] | None = None  # a stage's bug, raised by wait()
        self._models_warm = False
        self._ops = OpsServer(self, self.metrics, settings.ops)
        self._drift: Drift | None = None
        self._rollouts: Rollouts | None = None
        self._gc = GcSchedule(settings.gc, self.metrics.registry)
        self._job_chunks: ChunkService | None = None  # made in start(): it needs the database

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        s = self.settings
        assert s.bootstrap is not None
        await self._ops.start()  # first: /healthz and /readyz answer during the warm-up
        self._store = await off_loop(ResultStore, s.database_url)
        self._registry.watch()
        self._drift = await Drift.start(s, self._store.engine, self._registry, self.metrics)
        self._rollouts = await Rollouts.start(
            self._store.engine,
            self._registry,
            self.metrics,
            s.rollout,
            self._router,
            compare_on=self._executor.submit,
        )
        # Load every model before joining the group, so the first requests pay no load time.
        await off_loop(self._warm_up)
        self._models_warm = True
        self._scheduler.start()
        self._gc.start()  # after the warm-up: what exists now lives as long as the process
        if s.sink.write_process:
            self._writer = WriterProcess(self._store, s.database_url, nice=s.sink.write_nice)
            await off_loop(self._writer.start)
        sink = Sink(
            egress=self._egress,
            urgent_egress=self._urgent_egress,
            store=self._writer or self._store,
            results_topic=s.topics.results,
            dead_letter_topic=s.topics.dead_letters,
            group_id=s.kafka.group_id,
            max_value_bytes=s.kafka.max_message_bytes,
            config=s.sink,
        )
        self._delivery = Delivery(
            sink,
            self._done,
            self._tracker,
            commit=self._ingress.commit,
            commit_interval_s=s.kafka.commit_interval_ms / 1000,
            max_chunk=s.sink.max_chunk,
            on_durable=self._durable,
            yield_to_high=self._yield,
        )
        names = [*self._lane_of_topic, s.topics.results, s.topics.dead_letters]
        await ensure_topics(
            s.bootstrap, names, partitions=s.topics.partitions, security=s.kafka.security
        )
        await self._egress.start()
        await self._urgent_egress.start()
        chunks = ChunkPublisher(
            egress=self._egress,
            urgent_egress=self._urgent_egress,
            results_topic=s.topics.results,
            config=s.sink,
        )
        self._streams = Streams(chunks, self._registry.adapter, self._generated)
        await self._ingress.start(self._on_assigned, self._on_revoked)
        if s.topics.jobs is not None:  # chunks of distributed jobs, below live traffic
            self._job_chunks = ChunkService(
                s,
                self._registry,
                self._store,
                publish=self._egress.publish,
                before_batch=self._yield.hold,
                metrics=self.metrics.registry,
            )
            await self._job_chunks.start()
        self._failed = asyncio.get_running_loop().create_future()
        self._executor.fail_into(self._failed)  # too many hung models: exit, get restarted
        self._tasks = [
            asyncio.create_task(self._intake(urgent=False), name="inferlane-intake"),
            *(
                [asyncio.create_task(self._intake(urgent=True), name="inferlane-intake-urgent")]
                if self._ingress.has_urgent
                else []
            ),
            asyncio.create_task(self._schedule(), name="inferlane-schedule"),
            *self._delivery.start(),
        ]

    @property
    def assignment(self) -> set[TopicPartitionKey]:
        """The partitions this worker consumes now (empty before the group join)."""
        return self._ingress.assignment()

    # -- read-only views for the ops HTTP surface (worker.ops.view.WorkerView) ---------

    @property
    def models_warm(self) -> bool:
        return self._models_warm

    @property
    def store(self) -> ResultStore | None:
        return self._store

    @property
    def registry(self) -> ModelRegistry:
        return self._registry

    def lane_depths(self) -> dict[str, int]:
        return {lane.priority.value: len(lane) for lane in self._lanes}

    def in_flight_bytes(self) -> int:
        return self._in_flight.bytes

    def paused_partitions(self) -> set[TopicPartitionKey]:
        return self._ingress.paused()

    async def consumer_lag(self) -> dict[TopicPartitionKey, int]:
        return await self._ingress.lag()

    def _warm_up(self) -> None:
        for name in self._registry.names():
            try:
                self._registry.warmup(name)
            except Exception:  # the others still serve; its requests fail as model_error
                log.exception("model %r failed to load or warm up", name)

    async def wait(self) -> None:
        """Until a stage fails (its error is raised here) or the worker is stopped."""
        assert self._failed is not None, "start() first"
        await asyncio.gather(*self._tasks, self._failed)

    async def stop(self, *, drain: bool = True, timeout_s: float = 30.0) -> None:
        """Drain: finish everything consumed so far. Abort: stop now; the uncommitted
        records are replayed by whoever consumes the partitions next.

        Bounded whatever the database, broker or a model does: ``timeout_s`` for the
        drain, and at most the rest of it (or ``_STEP_GRACE_S``) for each shutdown step.
        """
        deadline = time.monotonic() + timeout_s
        self._accepting = False
        if drain:
            await _bounded(deadline, "drain", self._until_settled())
        self._closed = True
        await _cancelled(self._tasks, deadline)
        await _bounded(deadline, "the generative engines", self._generation.stop())
        if self._streams is not None:
            await _bounded(deadline, "the streamed chunks", self._streams.stop())
        if self._job_chunks is not None:
            await _bounded(deadline, "the job chunk", self._job_chunks.stop())
        if self._delivery is not None:
            await _bounded(deadline, "the SQL write", self._delivery.finish_write())
            await _bounded(deadline, "the offset commit", self._delivery.commit_now())
        if self._failed is not None and not self._failed.done():
            self._failed.cancel()
        await _bounded(deadline, "leaving the group", self._ingress.stop())
        await _bounded(deadline, "the producer", self._egress.stop())
        await _bounded(deadline, "the urgent producer", self._urgent_egress.stop())
        # Before the executor: the comparisons still queued run on it.
        if self._rollouts is not None:
            await _bounded(deadline, "the rollouts", self._rollouts.stop())
        await _bounded(deadline, "the executor", off_loop(self._executor.shutdown))
        await _bounded(deadline, "the model store", off_loop(self._registry.close))
        self._scheduler.close()
        await self._gc.stop()
        if self._drift is not None:
            await _bounded(deadline, "the drift windows", self._drift.stop())
        if self._writer is not None:
            await _bounded(deadline, "the SQL writer", off_loop(self._writer.close))
        if self._store is not None:
            await _bounded(deadline, "the database", off_loop(self._store.close))
        await self._ops.stop()

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set, then drain and shut down."""
        try:
            await self.start()
        except BaseException:
            await self.stop(drain=False)  # close what the failed start opened (clients, port)
            raise
        waiter = asyncio.create_task(stop.wait())
        serving = asyncio.create_task(self.wait())
        try:
            await asyncio.wait({waiter, serving}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            await self.stop(drain=not serving.done())
        if serving.done() and not serving.cancelled():
            serving.result()  # a failed stage surfaces to the caller

    async def __aenter__(self) -> Worker:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop(drain=exc is None)

    # -- intake ------------------------------------------------------------------------

    async def _intake(self, *, urgent: bool) -> None:
        while self._accepting:
            revocations = self._ingress.revocations
            room = None if urgent else self._bulk_room()
            records = await self._ingress.fetch(_FETCH_TIMEOUT_MS, urgent=urgent, max_records=room)
            if records and not urgent:
                await self._yield.held()
            if records:
                async with self._intake_locks[urgent]:
                    if self._ingress.revocations != revocations:  # some may be gone
                        assigned = self._ingress.assignment()
                        records = [
                            r for r in records if (r.source.topic, r.source.partition) in assigned
                        ]
                    if records:
                        await self._admit(records, urgent=urgent)
            self._apply_backpressure()

    async def _admit(self, records: list[RawRecord], *, urgent: bool) -> None:
        for r in records:
            self._tracker.started((r.source.topic, r.source.partition), r.source.offset)
        self._in_flight.add(records)
        self.metrics.consumed(Counter(r.source.topic for r in records))
        # Two thread hops cost more than a few records' admission, unless it would build
        # an adapter (a model not warmed at start: a candidate, a reloaded registry).
        if urgent and len(records) <= INLINE_RECORDS and self._registry.adapters_built():
            admitted = self._admission.admit(records)
        else:
            admitted = await off_loop(self._admission.admit, records)
        # Each high request's result leaves on the urgent stream, rejected ones' too.
        ended = (o.result for o in admitted.ended if o.result is not None)
        self._yield.arrived(
            sum(p.lane == Priority.HIGH for p in admitted.pending)
            + sum(r.priority == Priority.HIGH for r in ended)
        )
        for pending in admitted.pending:
            if self._generation.serves(pending) and self._streams is not None:
                self._generation.submit(pending, self._streams)
            else:
                self._lanes.push(pending)
        self._finish(admitted.ended)
        self._wake.set()

    def _bulk_room(self) -> int:
        lanes = self.settings.lanes
        return bulk_room(
            self._in_flight, high_reserve=lanes.high_reserve, single_lane=lanes.single_lane
        )

    def _apply_backpressure(self) -> None:
        self.metrics.in_flight.set(len(self._in_flight))
        self.metrics.queued.set(len(self._lanes))
        paused = paused_topics(
            self._lane_of_topic,
            self._lanes,
            load=self._in_flight.load,
            high_reserve=self.settings.lanes.high_reserve,
        )
        self._ingress.set_paused(paused)
        if self._ingress.has_urgent:  # else the same consumer reads the high topic
            self._ingress.pace_bulk(
                bulk_fetches_slow(self._lane_of_topic, self._lanes, paused, now_s=time.monotonic())
            )

    # -- schedule ----------------------------------------------------------------------

    def _open_lanes(self) -> list[Priority]:
        """The lanes that may form a batch: ``prefetch`` counts a lane's batches in the
        executor beyond those it runs at once, and on a single compute thread those of
        the lanes above it too, so queued low batches never hold a high one back (the
        thread runs queued batches highest lane first)."""
        prefetch, ahead = self.settings.batching.prefetch, 0
        open_lanes = []
        for lane in LANE_ORDER:
            ahead = self._running[lane] + (0 if self._executor.lanes_apart else ahead)
            if ahead < prefetch + self._executor.slots(lane) - 1:
                open_lanes.append(lane)
        return open_lanes

    def _idle_lanes(self) -> Collection[Priority]:
        """The lanes whose compute has room to start a batch now: where lanes run apart,
        each lane's own; on one thread, every lane or none."""
        if self._executor.lanes_apart:
            slots = self._executor.slots
            return [lane for lane in LANE_ORDER if self._running[lane] < slots(lane)]
        return () if any(self._running.values()) else LANE_ORDER

    async def _schedule(self) -> None:
        while True:
            self._wake.clear()
            now = time.monotonic()
            if open_lanes := self._open_lanes():
                plan = self._batcher.plan(now, idle=self._idle_lanes(), lanes=open_lanes)
            else:  # the executor is full: only expire what waited past its deadline
                plan = self._batcher.sweep(now)
            if plan.expired:
                self._scheduler.expired(plan.expired)
                self._finish([expired(p, now) for p in plan.expired])
            if plan.batch is not None:
                self._dispatch(plan.batch)
                continue
            wake_at = plan.wake_at_s
            timeout = None if wake_at is None else max(0.0, wake_at - time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    def _dispatch(self, batch: Batch) -> None:
        ready = self._registry.ensure(batch.model)  # one load, on the store's loader thread
        if not ready.done():  # other models' batches run meanwhile
            loop = asyncio.get_running_loop()
            ready.add_done_callback(lambda _: loop.call_soon_threadsafe(self._submit, batch))
            return
        self._submit(batch)

    def _submit(self, batch: Batch) -> None:
        if self._closed:  # its model loaded after stop(): uncommitted, so replayed later
            return
        self._running[lane_of(batch)] += 1
        self.metrics.batch(batch)
        self._scheduler.dispatched(batch)
        future = asyncio.wrap_future(self._executor.submit(batch))
        future.add_done_callback(lambda f: self._batch_done(batch, f))

    def _batch_done(self, batch: Batch, future: asyncio.Future[BatchRun]) -> None:
        self._running[lane_of(batch)] -= 1
        self._wake.set()
        try:
            # Executors report item failures as values; an exception here is our bug.
            run = future.result()
            self._scheduler.finished(batch, run)
            late = [p for p, r in zip(batch.items, run.results, strict=True) if r.expired]
            if late:
                self._scheduler.expired(late)
            outcomes = completed(batch, run, self._registry.adapter(batch.model))
        except Exception as exc:
            if self._failed is not None and not self._failed.done():
                self._failed.set_exception(exc)
            return
        if self._drift is not None:
            self._drift.observe(batch, outcomes)
        if self._rollouts is not None:
            self._rollouts.observe(batch, outcomes)
        self._sample_input(batch, outcomes)
        self._finish(outcomes)

    def _generated(self, pending: Pending, outcome: Outcome) -> None:
        """A generative request's end, its chunks already on Kafka."""
        if self._drift is not None:
            self._drift.observe(Batch(pending.model, [pending], time.monotonic()), [outcome])
        self._finish([outcome])

    def _sample_input(self, batch: Batch, outcomes: list[Outcome]) -> None:
        """One served input per batch: a later load checks an optimization on it too."""
        served = next((i for i, o in enumerate(outcomes) if o.result and not o.result.error), None)
        if served is not None:
            self._registry.record_input(batch.model, batch.items[served].request.inputs)

    def _batch_limit(self, model: str, lane: Priority) -> int:
        return self._scheduler.limit(model, lane)  # within max_batch and the model's

    # -- complete ----------------------------------------------------------------------

    def _finish(self, outcomes: list[Outcome]) -> None:
        if outcomes:
            self._done.put(outcomes)

    def _durable(self, chunk: Sequence[Outcome]) -> None:
        self.metrics.delivered(chunk)
        self._in_flight.remove(o.record for o in chunk)
        self._progress.set()
        self._apply_backpressure()

    async def _until_settled(self) -> None:
        await self._until(lambda: len(self._in_flight) == 0 and not len(self._lanes))

    async def _until(self, done: Callable[[], bool]) -> None:
        while not done():
            self._progress.clear()
            await self._progress.wait()

    # -- rebalance ---------------------------------------------------------------------

    async def _on_assigned(self, assigned: set[TopicPartitionKey]) -> None:
        """Resume where SQL says the durable results end, whatever Kafka's commit says:
        behind it (a commit that failed) or ahead of it (SQLite lost its last commits in
        a power loss). Upserts make the replay harmless."""
        assert self._store is not None
        stored = await off_loop(self._store.committed_offsets, self.settings.kafka.group_id)
        for tp in assigned:
            durable = stored.get(tp)
            if durable is not None:
                self._ingress.seek(tp, durable)
        self._apply_backpressure()

    async def _on_revoked(self, revoked: set[TopicPartitionKey]) -> None:
        """Hand back what has not started; finish what has, so its offsets commit.

        The wait covers the revoked partitions' started work only (a few batches and
        sink chunks), bounded by ``lanes.rebalance_drain_s``.
        """
        async with self._intake_locks[False], self._intake_locks[True]:
            dropped = self._lanes.remove_if(
                lambda p: (p.record.source.topic, p.record.source.partition) in revoked
            )
            self._in_flight.remove(p.record for p in dropped)
            self._progress.set()  # a stop() waiting to settle may be done now
            if self._accepting:  # on shutdown, stop() has drained (or chosen not to)
                deadline = time.monotonic() + self.settings.lanes.rebalance_drain_s
                done = self._until(lambda: self._in_flight.count_in(revoked) == 0)
                await _bounded(deadline, "the revoked partitions' work", done)
            if self._delivery is not None:
                commit = self._delivery.commit_now(then_forget=revoked)
                await _bounded(time.monotonic() + _STEP_GRACE_S, "the offset commit", commit)
            self._tracker.forget(revoked)


def choose_executor(
    registry: ModelRegistry,
    config: ComputeConfig,
    metrics: CollectorRegistry,
    yield_to_high: YieldToHigh | None = None,
) -> Executor:
    """Lane streams where the models run on a CUDA device (and the setting allows it),
    the compute thread everywhere else."""
    device = registry.device
    if config.cuda_streams and device.type == "cuda" and torch.cuda.is_available():
        return CudaLaneExecutor.configured(registry, config, metrics, device, yield_to_high)
    return ThreadExecutor.configured(registry, config, metrics, yield_to_high)


async def _cancelled(tasks: list[asyncio.Task[None]], deadline: float) -> None:
    """Cancel ``tasks`` and wait until they end. A cancellation can be lost (a timeout
    inside a stage expiring at the same moment turns it into a TimeoutError, which the
    stage retries), so a task still running after a grace period is cancelled again;
    past the deadline the rest are left behind, logged."""
    pending = set(tasks)
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=_STEP_GRACE_S)
        if pending and time.monotonic() > deadline:
            names = ", ".join(sorted(t.get_name() for t in pending))
            log.warning("stages still running after cancellation: %s; going on", names)
            break
    for task in tasks:  # retrieve their ends, so none is reported as never retrieved
        if task.done() and not task.cancelled():
            task.exception()


async def _bounded(deadline: float, what: str, step: Awaitable[object]) -> None:
    """Await ``step`` until ``deadline`` (at least ``_STEP_GRACE_S``); log if it overran."""
    timeout = max(_STEP_GRACE_S, deadline - time.monotonic())
    try:
        await asyncio.wait_for(step, timeout)
    except TimeoutError:
        log.warning("%s did not finish within %.1fs; going on without it", what, timeout)
