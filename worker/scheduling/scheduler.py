"""The scheduler the worker holds: controllers, curves, probe, shares and slicing, wired.

The worker calls it at three points: ``limit`` (the batcher's cap per model and lane),
``dispatched`` (a batch formed) and ``finished`` (a batch's forward pass ended). The
deciders it holds are pure; this object reads the clock and owns the probe's thread.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

import torch
from prometheus_client import CollectorRegistry

from consumers.contract import Priority
from worker.base.pending import Batch, BatchRun, Outcome, Pending
from worker.models import ModelRegistry
from worker.scheduling.controller import BatchController, Observation, Policy
from worker.scheduling.curve import ThroughputCurve
from worker.scheduling.lanes import LANE_ORDER, Lanes, lane_of
from worker.scheduling.metrics import SchedulingMetrics
from worker.scheduling.probes import BusyWindow, Probe, open_probe
from worker.scheduling.shares import LaneShares
from worker.settings import SchedulingConfig

TAIL = 0.95  # the quantile a lane's latency target bounds (as the controller's guard)


class Scheduler:
    def __init__(
        self,
        config: SchedulingConfig,
        registry: ModelRegistry,
        lanes: Lanes,
        *,
        max_batch: int,
        metrics: CollectorRegistry,
        clock: Callable[[], float] = time.monotonic,
        slices: bool = True,
        lanes_apart: bool = False,
        policy: Policy | None = None,
    ) -> None:
        """``policy``: the controllers' (a benchmark's baseline); None: ``config.policy``."""
        self.config = config
        self._policy: Policy = policy or config.policy
        self._registry = registry
        self._lanes = lanes
        self._clock = clock
        self._metrics = SchedulingMetrics(metrics)
        self._max_batch = max_batch
        self._controllers: dict[str, BatchController] = {}
        self._curves: dict[str, ThroughputCurve] = {}
        for name in registry.names():
            self._controller(name)
        self._batches: Counter[str] = Counter()  # finished since the last decision
        self._decided_s = clock()
        self._last_seen: dict[Priority, float] = {}  # lane -> last batch dispatched
        self._probe: Probe = BusyWindow(config.busy_window_s)
        self.shares = LaneShares(config.lane_shares(), window=config.share_window)
        self._lane_targets_ms = config.lane_latency_targets_ms()
        # Off where the backend preempts a lower lane's batch (per-lane CPU threads).
        self._slice_ms = config.slice_ms if slices else None
        self._lanes_apart = lanes_apart  # each lane computes on its own thread or stream

    def _controller(self, model: str) -> BatchController:
        """The model's controller; made on first sight for a model added later."""
        controller = self._controllers.get(model)
        if controller is None:
            spec = self._registry.spec(model)
            controller = BatchController(
                spec.scheduling, min(self._max_batch, spec.max_batch), policy=self._policy
            )
            self._controllers[model] = controller
            self._curves[model] = ThroughputCurve()
            self._metrics.cap.labels(model).set(controller.cap)
        return controller

    def start(self) -> None:
        """Pick the probe once the models are loaded: NVML if one runs on CUDA."""
        cuda = None
        for name in self._registry.names():
            try:
                device = self._registry.get(name).device
            except Exception:  # a model that fails to load serves errors, not the probe
                continue
            if device.type == "cuda":
                cuda = device.index if device.index is not None else torch.cuda.current_device()
        self._probe = open_probe(
            cuda_index=cuda,
            window_s=self.config.busy_window_s,
            nvml_every_s=self.config.nvml_every_s,
        )

    def close(self) -> None:
        self._probe.close()

    # -- the batcher's questions -------------------------------------------------------

    def limit(self, model: str, lane: Priority) -> int:
        """The model's cap, cut to the lane's latency target (a tail) and, while a higher
        lane is active, to a slice (a median), each sized from the throughput curve."""
        cap = self._controller(model).cap
        curve = self._curves[model]
        target_ms = self._lane_targets_ms[lane]
        if target_ms is not None:
            cap = min(cap, curve.size_within(target_ms, quantile=TAIL) or cap)
        slice_ms = self._slice_ms
        if slice_ms is not None and self._higher_lane_active(lane):
            cap = min(cap, curve.size_within(slice_ms) or cap)
        return cap

    def max_cost(self, model: str) -> int | None:
        return self._registry.spec(model).scheduling.max_batch_cost

    def _higher_lane_active(self, lane: Priority) -> bool:
        if self._lanes.single_lane or lane == Priority.HIGH:
            return False
        now = self._clock()
        for higher in LANE_ORDER[: LANE_ORDER.index(lane)]:
            if len(self._lanes.lane_for(higher)):
                return True
            seen = self._last_seen.get(higher)
            if seen is not None and now - seen < self.config.active_window_s:
                return True
        return False

    # -- what happened -----------------------------------------------------------------

    def dispatched(self, batch: Batch) -> None:
        for lane in {p.lane for p in batch.items}:
            self._last_seen[lane] = batch.formed_s
        self._metrics.formed(batch)

    def finished(self, batch: Batch, run: BatchRun) -> None:
        ended = run.started_s + run.compute_s
        self._controller(batch.model)
        self._probe.ran(run.started_s, ended, lane_of(batch) if self._lanes_apart else None)
        work = sum(p.cost for p in batch.items)
        self._curves[batch.model].record(len(batch), run.compute_s, ended, work)
        self._batches[batch.model] += 1
        late = (p for p in batch.items if p.deadline_s is not None and p.deadline_s < ended)
        self._metrics.count(self._metrics.late, late)
        now = self._clock()
        if now - self._decided_s >= self.config.decide_every_ms / 1000:
            self.decide(now)

    def batch_done(self, batch: Batch, run: BatchRun, outcomes: Sequence[Outcome]) -> None:
        """A batch observer: its run feeds the controller; items that came back expired
        (their deadline passed while it waited for the compute thread) are counted."""
        self.finished(batch, run)
        late = [p for p, r in zip(batch.items, run.results, strict=True) if r.expired]
        if late:
            self.expired(late)

    def expired(self, items: Iterable[Pending]) -> None:
        self._metrics.count(self._metrics.expired, items)

    def decide(self, now_s: float) -> None:
        """One controller decision per model, on what the probe and the lanes say now."""
        self._decided_s = now_s
        utilization = self._probe.utilization(now_s)
        for name, controller in self._controllers.items():
            obs = Observation(now_s, utilization, self._lanes.count(name), self._batches[name])
            decision = controller.decide(obs, self._curves[name])
            self._metrics.cap.labels(name).set(decision.cap)
            self._metrics.decisions.labels(name, decision.reason).inc()
            if utilization is not None:
                self._metrics.utilization.labels(name).set(utilization)
        self._batches.clear()
