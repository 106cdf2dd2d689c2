"""The worker's rollout stage: routes requests, counts what each version did, and
follows (and takes its turn deciding) the rollouts stored in SQL.

Every ``poll_s`` a task, in a thread: writes this worker's counts for the current
intervals, reads the newest rollout of each model, judges the running ones on the
counts of every worker, stores a decision if one is due (whichever worker's update
lands first decides; the others see it on their next read), then routes by what it
read. A restarted worker reads the same rows, so it resumes the rollout where the
group is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import uuid
from collections.abc import Sequence
from concurrent.futures import Future, wait
from datetime import UTC, datetime

from sqlalchemy import Engine

from storage import StoreUnavailable
from storage.rollouts import RolloutConflict, RolloutRecord, RolloutStore
from worker.base.blocking import off_loop, own_thread
from worker.base.pending import Batch, BatchRun, Outcome
from worker.execution.aside import Submit
from worker.models import Adapter, ClassifierAdapter, ModelRegistry, TextEmbeddingAdapter
from worker.models.specs import candidate_key
from worker.ops.metrics import WorkerMetrics
from worker.rollout.begin import begin
from worker.rollout.compare import Active, Comparer, Role
from worker.rollout.decide import judge
from worker.rollout.gates import GateValue, Measures, Pair, evaluate
from worker.rollout.metrics import RolloutMetrics
from worker.rollout.routing import Route, Router
from worker.rollout.stats import VersionStats
from worker.settings import RolloutConfig
from worker.settings.rollout_plan import Gates, Mode, State

log = logging.getLogger(__name__)


class Rollouts:
    def __init__(
        self,
        store: RolloutStore,
        registry: ModelRegistry,
        metrics: RolloutMetrics,
        config: RolloutConfig,
        router: Router,
        *,
        compare_on: Submit,
        worker_id: str | None = None,
    ) -> None:
        self._store = store
        self._registry = registry
        self._metrics = metrics
        self._config = config
        self._router = router
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._comparer = Comparer(
            compare_on,
            registry.adapter,
            max_queued=config.compare_queue,
            on_drop=lambda model: metrics.dropped.labels(model).inc(),
        )
        self._active: dict[str, Active] = {}  # model -> its running rollout
        self._records: dict[int, RolloutRecord] = {}  # as last read
        self._current: list[RolloutRecord] = []  # the newest rollout of each model
        # What the routes follow: the newest rollout id and the registry's candidates.
        self._followed: tuple[int | None, frozenset[str]] | None = None
        self._counts: dict[tuple[int, datetime, Role], VersionStats] = {}  # this worker's
        self._unroutable: set[int] = set()  # rollouts whose candidate is not in the registry
        self._warming: dict[str, Future[None]] = {}  # candidate key -> warm-up, until routed
        self.gates: dict[int, list[GateValue]] = {}  # last judged, per rollout
        self._task: asyncio.Task[None] | None = None
        # A cancelled await leaves its thread running: stop()'s flush must not overlap it.
        self._lock = threading.Lock()

    @classmethod
    async def start(
        cls,
        engine: Engine,
        registry: ModelRegistry,
        metrics: WorkerMetrics,
        config: RolloutConfig,
        router: Router,
        compare_on: Submit,
    ) -> Rollouts:
        """``compare_on``: the executor's ``submit``, where sampled batches run on the
        other version."""
        store, rollout_metrics = RolloutStore(engine), RolloutMetrics(metrics.registry)
        rollouts = cls(store, registry, rollout_metrics, config, router, compare_on=compare_on)
        await off_loop(rollouts._start_declared)
        # Route as the group does before the first request is admitted.
        await off_loop(rollouts.tick)
        await off_loop(rollouts._route_warmed)
        rollouts._task = asyncio.create_task(rollouts._run(), name="inferlane-rollouts")
        return rollouts

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await off_loop(self._comparer.drain, 5.0)
        try:
            await off_loop(self.flush)
        finally:
            await off_loop(self._comparer.close)

    # -- the hot path ------------------------------------------------------------------

    def batch_done(self, batch: Batch, run: BatchRun, outcomes: Sequence[Outcome]) -> None:
        """On the event loop: queue a finished batch of a model under rollout."""
        if self._active and batch.items:
            active = self._active.get(batch.items[0].request.model)
            if active is not None:
                self._comparer.submit(active, batch, list(outcomes))

    # -- the poll ----------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._config.poll_s)
            try:
                await off_loop(self.tick)
            except StoreUnavailable as exc:  # keep routing as last read; retry next time
                log.warning("rollouts not refreshed: %s", exc)
            except Exception:  # a bug here must not stop the worker serving
                log.exception("rollouts not refreshed")

    def tick(self, now: datetime | None = None) -> None:
        """Write counts, read the rollouts, judge the running ones, route (a thread)."""
        with self._lock:
            self._flush()
            if self._unchanged():
                return
            now = now or datetime.now(UTC)
            current = []
            for record in self._store.current():
                if record.state == State.RUNNING:
                    record = self._judge(record, now) or record
                current.append(record)
            self._follow(current)

    def flush(self) -> None:
        """Write this worker's counts now (on stop: the last seconds' counts)."""
        with self._lock:
            self._flush()

    def _flush(self) -> None:
        dirty = set()
        for (rollout_id, role), delta in self._comparer.take().items():
            record = self._records.get(rollout_id)
            if record is None:
                continue
            key = (rollout_id, record.interval_start, role)
            self._counts.setdefault(key, VersionStats()).merge(delta)
            dirty.add(key)
        if dirty:
            self._store.record_stats(
                [
                    self._counts[rid, start, role].as_row(rid, start, role.value, self.worker_id)
                    for rid, start, role in dirty
                ]
            )

    def _unchanged(self) -> bool:
        """Whether the rollouts as last read still hold, known from one indexed query
        while none of them runs: then only a new rollout (by any worker, or the CLI)
        or a registry reload changes where requests go (an ended rollout never changes)."""
        if self._followed is None or any(r.state == State.RUNNING for r in self._current):
            return False
        candidates = frozenset(self._registry.candidates())
        return self._followed == (self._store.newest_id(), candidates)

    def _judge(self, record: RolloutRecord, now: datetime) -> RolloutRecord | None:
        interval, rollout = _pair(), _pair()
        for row in self._store.stats(record.id):  # every interval's: the tests' counts
            stats = VersionStats.from_row(row)
            _side(rollout, row.role).merge(stats)
            if row.interval_start == record.interval_start:
                _side(interval, row.role).merge(stats)
        adapter = self._registry.adapter(record.model)
        values = evaluate(interval, rollout, Gates.model_validate(record.gates), measures(adapter))
        self.gates[record.id] = values
        self._metrics.gates(record, values)
        decision = judge(record, values, now)
        if decision is None:
            return None
        decided = self._store.decide(
            record,
            decision=decision.decision,
            state=decision.state.value,
            step=decision.step,
            share=decision.share,
            passes=decision.passes,
            interval_start=decision.interval_start,
            gates={v.name: v.as_json() for v in values},
            reason=decision.reason,
        )
        if decided is not None:  # None: another worker decided this interval first
            self._metrics.decisions.labels(record.model, decision.decision).inc()
            level = logging.WARNING if decision.decision == "rollback" else logging.INFO
            log.log(
                level,
                "rollout %s of %s %s: %s (share %.0f%%): %s",
                record.id,
                record.model,
                record.candidate_version,
                decision.decision,
                decision.share * 100,
                decision.reason,
            )
        return decided

    def _follow(self, records: list[RolloutRecord]) -> None:
        candidates = self._registry.candidates()
        routes: dict[str, Route] = {}
        active: dict[str, Active] = {}
        warming: set[str] = set()
        self._current = records
        self._followed = (max((r.id for r in records), default=None), frozenset(candidates))
        for r in records:
            self._records[r.id] = r
            self._metrics.show(r)
            if r.state not in (State.RUNNING, State.PROMOTED):
                continue
            key = candidate_key(r.model, r.candidate_version)
            if key not in candidates:  # e.g. promoted, then made the primary in the file
                if r.id not in self._unroutable and r.state == State.RUNNING:
                    log.warning("rollout %s: %s is not a registry candidate", r.id, key)
                self._unroutable.add(r.id)
                continue
            if r.state == State.PROMOTED:
                routes[r.model] = Route(r.id, key, 1.0)
                continue
            if not self._warmed(r.model, key):
                warming.add(key)
                continue  # the primary answers until the candidate is warm
            mode = Mode(r.mode)
            active[r.model] = Active(r.id, r.model, key, mode, r.sample)
            routes[r.model] = Route(r.id, key, r.share if mode == Mode.CANARY else 0.0)
        self._active = active
        self._router.update(routes)
        self._warming = {k: f for k, f in self._warming.items() if k in warming}
        running = {
            a.rollout_id: self._records[a.rollout_id].interval_start for a in active.values()
        }
        self._counts = {k: v for k, v in self._counts.items() if running.get(k[0]) == k[1]}

    def _warmed(self, model: str, key: str) -> bool:
        """Whether requests may go to the candidate: it is routed already, or its warm-up
        has ended. Its first batches would otherwise pay for the load and lazy init, and
        fail the p99 gate for that. The warm-up runs in a thread of its own, so a slow
        one holds up no other model's rollout, nor the tick."""
        active = self._active.get(model)
        if active is not None and active.candidate == key:
            return True
        warming = self._warming.get(key)
        if warming is None:
            self._warming[key] = warming = Future()
            own_thread(f"warm-{key}", self._warm, key, warming)
        return warming.done()

    def _warm(self, key: str, done: Future[None]) -> None:
        try:
            self._registry.warmup(key)
        except Exception:  # its requests then fail, and the error gate rolls it back
            log.exception("candidate %s failed to load or warm up", key)
        finally:
            done.set_result(None)

    def _route_warmed(self) -> None:
        """Wait for the warm-ups under way, then route to their candidates."""
        with self._lock:
            warming = list(self._warming.values())
        if warming:
            wait(warming)
            self.tick()

    def _start_declared(self) -> None:
        """Start the rollouts the registry declares (``[candidates.rollout]``), once each."""
        for candidate in self._registry.candidates().values():
            if candidate.rollout is None:
                continue
            started = self._store.all(candidate.name)
            if any(r.candidate_version == candidate.version for r in started):
                continue
            primary = self._registry.spec(candidate.name)
            with contextlib.suppress(RolloutConflict):  # running already, or another worker
                begin(self._store, primary, candidate, candidate.rollout)

    def status(self) -> list[dict[str, object]]:
        """The rollouts as last read, with the gates this worker judged last."""
        return [
            {
                "id": r.id,
                "model": r.model,
                "candidate_version": r.candidate_version,
                "primary_version": r.primary_version,
                "mode": r.mode,
                "state": r.state,
                "share": r.share,
                "step": r.step,
                "steps": r.steps,
                "passes": r.passes,
                "passes_needed": r.passes_needed,
                "reason": r.reason,
                "gates": {v.name: v.as_json() for v in self.gates.get(r.id, [])},
            }
            for r in self._current
        ]


def measures(adapter: Adapter) -> Measures:
    """Classifiers: labels right or wrong, disagreement 0 or 1; embeddings: cosine
    distances, 0 to 2; regressors: absolute differences, unbounded."""
    if isinstance(adapter, ClassifierAdapter):
        return Measures(binary_labels=True, disagreement_bound=1.0)
    if isinstance(adapter, TextEmbeddingAdapter):
        return Measures(binary_labels=False, disagreement_bound=2.0)
    return Measures(binary_labels=False, disagreement_bound=None)


def _pair() -> Pair:
    return Pair(VersionStats(), VersionStats())


def _side(pair: Pair, role: str) -> VersionStats:
    return pair.primary if Role(role) == Role.PRIMARY else pair.candidate
