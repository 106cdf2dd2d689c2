"""The batch controller: one model's batch cap, moved by measurements (a pure decider).

The practitioners' rule (utilization below ``min_util`` → cap +``step_up``; above
``max_util`` → cap -``step_down``) has a trap: under a backlog the device is busy by
definition, so "busy → shrink" walks the cap down to 1 and throughput collapses.
The adaptive policy keeps the rule where it is right and replaces it where it is not:

- latency guard first: a cap whose forward passes exceed ``latency_target_ms`` shrinks
  (unless the measured curve says no size can meet it: then throughput decides);
- backlog (a full batch is waiting) with a busy device: climb the measured throughput
  curve, exploring the neighbour sizes not measured lately (double, half, one step up
  and down), and settle on the size with the most items/s that meets the latency
  target (moves only for a gain above ``HYSTERESIS``);
- backlog with an idle device: the device is not the bottleneck, bigger batches spread
  the per-batch cost, so grow;
- headroom (no backlog): utilization decides, as in the rule.

``naive`` is the rule alone (the baseline that collapses); ``fixed`` holds max_batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from worker.scheduling.curve import ThroughputCurve
from worker.scheduling.params import ControllerParams

Policy = Literal["adaptive", "naive", "fixed"]

HYSTERESIS = 0.03  # a measured size must beat the current one by this to take over
STALE_S = 60.0  # a neighbour measured longer ago than this is explored again
# Moves up (best, explore, grow) need a tail this far under the target, the guard one
# above it: a noise band, so that a size near the target does not flip between the two.
LATENCY_MARGIN = 0.9
START_CAP = 32  # the first cap (bounded by max_batch): growth or the guard move it


@dataclass(frozen=True, slots=True)
class Observation:
    """What the controller sees at one decision."""

    now_s: float
    utilization: float | None  # 0..1; None: no measurement yet
    queued: int  # this model's items waiting in the lanes
    batches: int  # this model's batches finished since the last decision


@dataclass(frozen=True, slots=True)
class Decision:
    cap: int
    reason: str  # why: idle, latency, headroom, busy, explore, best, converged, ...


class BatchController:
    def __init__(
        self, params: ControllerParams, max_batch: int, *, policy: Policy = "adaptive"
    ) -> None:
        self.params = params
        self.max_batch = max_batch
        self.policy: Policy = policy
        self._cap = max_batch if policy == "fixed" else min(max_batch, START_CAP)

    @property
    def cap(self) -> int:
        return self._cap

    def decide(self, obs: Observation, curve: ThroughputCurve) -> Decision:
        if self.policy == "fixed":
            return Decision(self._cap, "fixed")
        if obs.batches == 0 or obs.utilization is None:
            return Decision(self._cap, "idle")  # no new evidence: hold
        if self.policy == "naive":
            decision = self._by_utilization(obs.utilization)
        else:
            decision = self._adaptive(obs, curve)
        self._cap = decision.cap
        return decision

    # -- steps -------------------------------------------------------------------------

    def _up(self, cap: int) -> int:
        return min(self.max_batch, max(cap + 1, round(cap * (1 + self.params.step_up))))

    def _down(self, cap: int) -> int:
        return max(1, min(cap - 1, round(cap * (1 - self.params.step_down))))

    def _by_utilization(self, utilization: float) -> Decision:
        if utilization < self.params.min_util:
            return Decision(self._up(self._cap), "headroom")
        if utilization > self.params.max_util:
            return Decision(self._down(self._cap), "busy")
        return Decision(self._cap, "steady")

    # -- adaptive ----------------------------------------------------------------------

    def _adaptive(self, obs: Observation, curve: ThroughputCurve) -> Decision:
        cap, target = self._cap, self._target_ms(curve)
        tail = curve.tail_ms(cap)
        if tail is not None and tail > target:
            # In proportion when far above (time per item falls with size, so this errs
            # large and the next measurement corrects it), else one step.
            return Decision(min(self._down(cap), max(1, int(cap * target / tail))), "latency")
        if obs.queued < cap:  # headroom: no full batch waits, the rule is right here
            decision = self._by_utilization(obs.utilization or 0.0)
            if decision.cap > cap and not self._fits(curve, decision.cap):
                return Decision(cap, "steady")
            return decision
        if (obs.utilization or 0.0) < self.params.min_util:  # backlog, device not the limit
            up = self._up(cap)
            return Decision(up if self._fits(curve, up) else cap, "headroom")
        return self._climb(obs.now_s, curve)

    def _climb(self, now_s: float, curve: ThroughputCurve) -> Decision:
        """Hill-climb on the measured curve: go to the best size when it beats the cap by
        more than the hysteresis; from a size that is (near) the best, measure the
        neighbours not measured in ``STALE_S``, so the curve follows a drifting optimum."""
        cap, target = self._cap, self._target_ms(curve)
        current = curve.rate(cap)
        if current is None:
            return Decision(cap, "measuring")
        best = curve.best(target_ms=target * LATENCY_MARGIN, max_size=self.max_batch)
        gain = (curve.rate(best) or 0.0) / current - 1 if best is not None else 0.0
        if best is not None and best != cap and gain > HYSTERESIS:
            return Decision(best, "best")
        for neighbour in self._neighbours(cap):
            seen = curve.seen_s(neighbour)
            fresh = seen is not None and now_s - seen < STALE_S
            if not fresh and self._fits(curve, neighbour):
                return Decision(neighbour, "explore")
        return Decision(cap, "converged")

    def _neighbours(self, cap: int) -> list[int]:
        """Double and half first (another basin: on CPU, minilm's best size moved
        between 8 and 64), then one step up and down (refinement)."""
        sizes = (min(self.max_batch, 2 * cap), max(1, cap // 2), self._up(cap), self._down(cap))
        return [size for size in dict.fromkeys(sizes) if size != cap]

    def _target_ms(self, curve: ThroughputCurve) -> float:
        """The latency target, or none (infinity) when no batch size can meet it: a
        batch of one is expected to take longer. Shrinking would then cost throughput
        and buy no latency: the collapse again, by another road."""
        floor = curve.floor_ms()
        target = self.params.latency_target_ms
        if target is None or (floor is not None and floor > target):
            return math.inf
        return target

    def _fits(self, curve: ThroughputCurve, size: int) -> bool:
        """Whether ``size`` is expected to meet the latency target: its own tail when
        measured, else the current cap's tail scaled by size (an upper estimate)."""
        tail = curve.tail_ms(size)
        if tail is None:
            base = curve.tail_ms(self._cap)
            if base is None:
                return True
            tail = base * size / self._cap
        return tail <= self._target_ms(curve) * LATENCY_MARGIN
