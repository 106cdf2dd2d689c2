"""The worker: a facade that takes input, schedules, executes and completes.

It composes the stages, each built from its settings sections: ``Intake`` (fetch,
admit, queue in the lanes), ``Dispatch`` (a batch whenever the executor has room, run
on the executor, its end to the batch observers), ``Output`` (outcomes to Kafka, then
SQL with the offsets they complete, then the commit). Forward passes and SQL writes
run off the event loop, so the Kafka group keeps its heartbeat.
"""

from __future__ import annotations

import asyncio
import time
from types import TracebackType

from consumers.offsets import TopicPartitionKey
from storage import ResultStore
from worker.base import urgent_loop
from worker.base.blocking import off_loop
from worker.base.pending import Batch, Outcome, Pending
from worker.base.steps import bounded, cancelled
from worker.delivery.output import Output
from worker.drift.runtime import Drift
from worker.execution.choose import choose_executor
from worker.execution.dispatch import BatchObserver, Dispatch
from worker.execution.gc_schedule import GcSchedule
from worker.execution.generative.metrics import GenerationMetrics
from worker.execution.generative.stage import GenerationStage
from worker.intake.stage import Intake
from worker.jobs.chunk_service import ChunkService
from worker.models import ModelRegistry
from worker.models.samples import ServedInputs
from worker.ops.http import OpsServer
from worker.ops.metrics import WorkerMetrics
from worker.rollout.routing import Router
from worker.rollout.runtime import Rollouts
from worker.scheduling.batcher import Batcher
from worker.scheduling.controller import Policy
from worker.scheduling.lanes import Lanes
from worker.scheduling.scheduler import Scheduler
from worker.scheduling.yield_to_high import YieldToHigh
from worker.settings import WorkerSettings


class Worker:
    """``async with Worker(settings, registry) as w: await w.wait()``, or ``launch.run_until``.
    ``lanes``, ``policy``: a benchmark's baselines (``bench.baseline_worker``)."""

    def __init__(
        self,
        settings: WorkerSettings,
        registry: ModelRegistry,
        *,
        metrics: WorkerMetrics | None = None,
        lanes: Lanes | None = None,
        policy: Policy | None = None,
    ) -> None:
        if settings.bootstrap is None:
            raise ValueError("settings.bootstrap is required (the CLI starts a broker if unset)")
        self.settings, self.metrics, self.registry = settings, metrics or WorkerMetrics(), registry
        registry.configure(settings.model_store, self.metrics.registry)
        self.metrics.label_models(registry.knows)  # made-up names share one label
        self._lanes = Lanes(settings.lanes.capacity) if lanes is None else lanes  # [] is falsy
        # Bulk work waits while high requests are in the worker (one FIFO lane: never).
        share = None if self._lanes.single_lane else settings.scheduling.yield_share
        self._yield = YieldToHigh(share, metrics=self.metrics.registry)
        self._executor = executor = choose_executor(
            registry, settings.compute, self.metrics.registry, self._yield
        )
        # A backend that preempts needs no slices, and riders would only lengthen a
        # higher lane's batch: the lower lane's own thread serves them.
        self._scheduler = scheduler = Scheduler(
            settings.scheduling, registry, self._lanes, max_batch=settings.batching.max_batch,
            metrics=self.metrics.registry, slices=not executor.preempts,
            lanes_apart=executor.lanes_apart, policy=policy,
        )  # fmt: skip
        batcher = Batcher(
            self._lanes, settings.batching, limit=scheduler.limit,
            grouped=lambda model: registry.adapter(model).variable_cost,
            max_cost=scheduler.max_cost, shares=scheduler.shares, resident=registry.on_device,
            riders=not executor.preempts,
        )  # fmt: skip
        # Generative models run on their engines, which apply the lanes at every step.
        self._generation_metrics = GenerationMetrics(self.metrics.registry)
        self._generation = GenerationStage(
            registry, settings.scheduling.lane_shares(), self._generation_metrics
        )
        self._router = Router()  # rollouts send a share of a model's requests to a candidate
        self._output = output = Output(settings)
        self._observers: list[BatchObserver] = [scheduler, ServedInputs(registry.record_input)]
        self._dispatch = Dispatch(
            settings.batching, batcher, scheduler, executor, registry,
            observers=self._observers, finish=output.finish, count=self.metrics.batch,
            failed=self._fail,
        )  # fmt: skip
        self.intake = Intake(  # also what the ops surface reads of the intake
            settings, registry, self._lanes, output.tracker, route=self._router.route,
            generation=self._generation, yield_to_high=self._yield, metrics=self.metrics,
            finish=output.finish, wake=self._dispatch.wake,
        )  # fmt: skip
        self._ops = OpsServer(self, self.metrics, settings.ops)
        self._gc = GcSchedule(settings.gc, self.metrics.registry)
        self.store: ResultStore | None = None  # open from start() on
        self._drift: Drift | None = None
        self._rollouts: Rollouts | None = None
        self._job_chunks: ChunkService | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._failed: asyncio.Future[None] | None = None  # a stage's bug, raised by wait()
        self.models_warm = False

    async def start(self) -> None:
        s = self.settings
        urgent_loop.install(asyncio.get_running_loop())  # before any task: see its module
        await self._ops.start()  # first: /healthz and /readyz answer during the warm-up
        self.store = store = await off_loop(ResultStore, s.database_url)
        self.registry.watch()
        self._drift = drift = await Drift.start(
            s, store.engine, self.registry, self.metrics, compute_on=self._executor.submit
        )
        self._rollouts = await Rollouts.start(
            store.engine, self.registry, self.metrics, s.rollout, self._router,
            compare_on=self._executor.submit,
        )  # fmt: skip
        self._observers += [o for o in (drift, self._rollouts) if o is not None]
        # Load every model before joining the group, so the first requests pay no load time.
        await off_loop(self.registry.warm_every)
        self.models_warm = True
        self._scheduler.start()
        self._gc.start()  # after the warm-up: what exists now lives as long as the process
        streams = await self._output.start(
            store, commit=self.intake.commit, on_durable=self.intake.durable,
            yield_to_high=self._yield, adapter_for=self.registry.adapter,
            generated=self._generated, generation_metrics=self._generation_metrics,
        )  # fmt: skip
        await self.intake.start(store, streams, self._output.commit_now)
        if s.topics.jobs is not None:  # chunks of distributed jobs, below live traffic
            self._job_chunks = ChunkService(
                s, self.registry, store, publish=self._output.publish,
                submit=self._executor.submit, metrics=self.metrics.registry,
            )  # fmt: skip
            await self._job_chunks.start()
        self._failed = asyncio.get_running_loop().create_future()
        self._executor.fail_into(self._failed)  # too many hung models: exit, get restarted
        dispatch = asyncio.create_task(self._dispatch.run(), name="inferlane-schedule")
        self._tasks = [*self.intake.tasks(), dispatch, *self._output.tasks()]

    @property
    def assignment(self) -> set[TopicPartitionKey]:
        """The partitions this worker consumes now (empty before the group join)."""
        return self.intake.assignment

    async def wait(self) -> None:
        """Until a stage fails (its error is raised here) or the worker is stopped."""
        assert self._failed is not None, "start() first"
        await asyncio.gather(*self._tasks, self._failed)

    async def stop(self, *, drain: bool = True, timeout_s: float = 30.0) -> None:
        """Drain: finish everything consumed so far. Abort: stop now; the uncommitted
        records are replayed by whoever consumes the partitions next. Bounded whatever
        the database, broker or a model does: ``timeout_s`` for the drain, and at most
        the rest of it (or ``STEP_GRACE_S``) for each shutdown step."""
        deadline = time.monotonic() + timeout_s
        self.intake.stop_accepting()
        if drain:
            await bounded(deadline, "drain", self.intake.settled())
        self._dispatch.closed = True
        await cancelled(self._tasks, deadline)
        await bounded(deadline, "the generative engines", self._generation.stop())
        if self._job_chunks is not None:
            await bounded(deadline, "the job chunk", self._job_chunks.stop())
        await self._output.settle(deadline)
        if self._failed is not None and not self._failed.done():
            self._failed.cancel()
        await bounded(deadline, "leaving the group", self.intake.stop())
        await self._output.stop(deadline)
        # The rollouts before the executor: the comparisons still queued run on it.
        for name, part in (("the rollouts", self._rollouts), ("the drift windows", self._drift)):
            if part is not None:
                await bounded(deadline, name, part.stop())
        await bounded(deadline, "the executor", off_loop(self._executor.shutdown))
        await bounded(deadline, "the model store", off_loop(self.registry.close))
        self._scheduler.close()
        await self._gc.stop()
        if self.store is not None:
            await bounded(deadline, "the database", off_loop(self.store.close))
        await self._ops.stop()

    async def __aenter__(self) -> Worker:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        await self.stop(drain=exc is None)

    def _fail(self, exc: BaseException) -> None:
        if self._failed is not None and not self._failed.done():
            self._failed.set_exception(exc)

    def _generated(self, pending: Pending, outcome: Outcome) -> None:
        """A generative request's end, its chunks already on Kafka."""
        if self._drift is not None:
            self._drift.observe(Batch(pending.model, [pending], time.monotonic()), [outcome])
        self._output.finish([outcome])
