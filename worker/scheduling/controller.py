"""The batch controller: one model's batch cap, moved by measurements (a pure decider).

The practitioners' rule (utilization below ``min_util`` → cap +``step_up``; above
``max_util`` → cap -``step_down``) has a trap: under a backlog the device is busy by
definition, so "busy → shrink" walks the cap down to 1 and throughput collapses.
The adaptive policy keeps the rule where it is right and replaces it where it is not:

- latency guard first: a cap whose forward passes exceed ``latency_target_ms`` shrinks
  (unless the measured curve says no size can meet it: then throughput decides);
- backlog (a full batch is waiting) with a busy device: climb the measured throughput
  curve. From the cap, take a short trip to each neighbour size not measured lately
  (double, half, one step up and down) that should meet the latency target; the
  neighbour takes over only when its work/s (``curve``) beat the cap's by more than
  ``HYSTERESIS`` and by more than the noise (``curve.beats``), else the cap returns.
  Once a round of trips leaves the cap where it is, the climb is settled: it explores
  again on a longer timer, or as soon as the cap's own rate departs from its settled
  rate (measured over its first batches after settling) in two windows in a row (the
  workload changed, the optimum may have moved; a shared machine's slow seconds pass
  within them);
- backlog with an idle device: the device is not the bottleneck, bigger batches spread
  the per-batch cost, so grow;
- headroom (no backlog): utilization decides, as in the rule.

Leaving the climb (headroom, a latency move) ends a trip and unsettles it.
``naive`` is the rule alone (the baseline that collapses); ``fixed`` holds max_batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

from worker.scheduling.curve import MIN_SAMPLES, RECENT, RateStats, ThroughputCurve, beats
from worker.settings.controller_params import ControllerParams

Policy = Literal["adaptive", "naive", "fixed"]

HYSTERESIS = 0.03  # a measured size must beat the current one by this to take over
Z = 2.0  # ... and by this many standard errors (one-sided, ~2% false moves per trip)
STALE_S = 60.0  # a neighbour measured longer ago than this is explored again
SETTLED_STALE_S = 300.0  # the same once settled
# A trip whose neighbour has fewer than MIN_SAMPLES batches of its size once this many
# batches of other sizes ended returns (lane targets or slices may cut every batch
# below it).
TRIP_OTHERS = 2 * MIN_SAMPLES
# Settled: the cap's recent rate departing from its settled rate by more than this (and
# the noise), in its last RECENT batches and again over the CONFIRM after them, means the
# workload changed.
DRIFT = 0.2
CONFIRM = 2 * RECENT
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
    reason: str  # idle, latency, headroom, busy, steady, measuring, explore, back, best,
    # settled, drift


@dataclass(frozen=True, slots=True)
class _Trip:
    home: int  # the cap to return to unless the neighbour beats it
    rate: RateStats  # the home cap's rate
    started_s: float  # the neighbour's batches from here on measure it
    recorded: int  # the curve's batches (any size) when it began


@dataclass(frozen=True, slots=True)
class _Settled:
    # The cap's batches that count end from here: from settling until ``rate`` is
    # taken, then from that moment on (what the drift check compares with it).
    since_s: float
    # The cap's rate over its first RECENT batches after settling (None: not yet). Not
    # the batches that chose the cap: a size wins its trip on rates that beat the
    # others, so those run high (a fast moment of a shared machine lifts a few batches
    # together), and its true rate after them read as a departure.
    rate: RateStats | None = None
    departed_s: float | None = None  # when its rate was first seen departing; None: not


class BatchController:
    def __init__(
        self, params: ControllerParams, max_batch: int, *, policy: Policy = "adaptive"
    ) -> None:
        self.params = params
        self.max_batch = max_batch
        self.policy: Policy = policy
        self._cap = max_batch if policy == "fixed" else min(max_batch, START_CAP)
        self._trip: _Trip | None = None
        self._settled: _Settled | None = None
        # Batches that ended before this are not compared: the workload changed since.
        self._since_s = -math.inf

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
        decision = self._off_climb(obs, curve)
        if decision is None:
            return self._climb(obs.now_s, curve)
        self._trip = self._settled = None  # the climb starts from the new cap, unsettled
        return decision

    def _off_climb(self, obs: Observation, curve: ThroughputCurve) -> Decision | None:
        """The latency guard and the headroom paths; None: backlog and busy, climb."""
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
        return None

    def _climb(self, now_s: float, curve: ThroughputCurve) -> Decision:
        """Hill-climb on the measured curve by trips to the neighbours not measured in
        ``STALE_S`` (``SETTLED_STALE_S`` once settled), so the curve follows a drifting
        optimum; settle when none is left to measure."""
        if self._trip is not None:
            return self._end_trip(self._trip, curve)
        cap = self._cap
        current = curve.rate_stats(cap, since_s=self._since_s)
        if current is None:
            return Decision(cap, "measuring")
        if self._settled is not None and self._drifted(self._settled, now_s, curve):
            self._settled, self._since_s = None, now_s
            return Decision(cap, "drift")
        stale_s = STALE_S if self._settled is None else SETTLED_STALE_S
        for neighbour in self._neighbours(cap):
            seen = curve.seen_s(neighbour)
            fresh = seen is not None and seen >= self._since_s and now_s - seen < stale_s
            if not fresh and self._fits(curve, neighbour):
                self._trip = _Trip(cap, current, now_s, curve.recorded)
                return Decision(neighbour, "explore")
        if self._settled is None:
            self._settled = _Settled(now_s)
        return Decision(cap, "settled")

    def _end_trip(self, trip: _Trip, curve: ThroughputCurve) -> Decision:
        """Once the neighbour has batches of its own, it takes over only when it beats
        the cap it left by more than the hysteresis and the noise; one ahead by less than
        the noise gets a few more batches (a 30% gain can hide in three noisy ones)."""
        cap = self._cap
        there = curve.rate_stats(cap, since_s=trip.started_s)
        if there is None:
            others = curve.recorded - trip.recorded - curve.count(cap, since_s=trip.started_s)
            if others < TRIP_OTHERS:
                return Decision(cap, "explore")
            self._trip = None
            return Decision(trip.home, "back")
        fits = self._fits(curve, cap)
        if fits and beats(there, trip.rate, margin=HYSTERESIS, z=Z):
            self._trip = self._settled = None
            return Decision(cap, "best")
        ahead = there.mean > trip.rate.mean * (1 + HYSTERESIS)
        if fits and ahead and there.n < 2 * MIN_SAMPLES:
            return Decision(cap, "explore")
        self._trip = None
        return Decision(trip.home, "back")

    def _drifted(self, settled: _Settled, now_s: float, curve: ThroughputCurve) -> bool:
        """Whether the cap's rate departs from its settled rate (its first ``RECENT``
        batches after settling; until there are that many, no), either way, in two
        windows in a row: its latest batches, then the ``CONFIRM`` that ended after that
        was seen (recorded in ``departed_s``; cleared when the second window does not
        depart). On a shared VM the rate moves > 20% for a few seconds at a time; the
        re-exploration that set off showed as the cap's variation (docs/SCHEDULING.md)."""
        reference = settled.rate
        if reference is None:
            if curve.count(self._cap, since_s=settled.since_s) >= RECENT:
                rate = curve.rate_stats(self._cap, since_s=settled.since_s)
                self._settled = replace(settled, since_s=now_s, rate=rate)
            return False
        if settled.departed_s is None:
            if self._departs(reference, curve, since_s=settled.since_s):
                self._settled = replace(settled, departed_s=now_s)
            return False
        if curve.count(self._cap, since_s=settled.departed_s) < CONFIRM:
            return False  # the second window is not full yet
        if self._departs(reference, curve, since_s=settled.departed_s, last=CONFIRM):
            return True
        self._settled = replace(settled, departed_s=None)
        return False

    def _departs(
        self, reference: RateStats, curve: ThroughputCurve, *, since_s: float, last: int = RECENT
    ) -> bool:
        recent = curve.rate_stats(self._cap, since_s=since_s, last=last)
        if recent is None:
            return False
        return beats(recent, reference, margin=DRIFT, z=Z) or beats(
            reference, recent, margin=DRIFT, z=Z
        )

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
