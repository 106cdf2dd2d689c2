"""Rollout metrics, on the worker's Prometheus registry (the status page reads them)."""

from __future__ import annotations

import math

from storage.rollouts import RolloutRecord
from worker.base.metric_set import MetricSet, counter, gauge
from worker.rollout.gates import GateValue
from worker.settings.rollout_plan import State

_GATE = ("model", "candidate", "gate")
_BOUND_DOC = (
    "The {end} end of the gate's confidence sequence as this worker judged it "
    "last (sequential gates: error rate, disagreement, labelled error; else NaN)"
)


class RolloutMetrics(MetricSet):
    share = gauge(
        "inferlane_rollout_share",
        "Fraction of the model's requests the candidate answers (0 in shadow mode)",
        "model",
        "candidate",
        "mode",
    )
    state = gauge(
        "inferlane_rollout_state",
        "1 for the rollout's current state (running, promoted, rolled_back, aborted)",
        "model",
        "candidate",
        "state",
    )
    gate = gauge(
        "inferlane_rollout_gate_value",
        "The gate's value as this worker judged it last: the rollout's estimate (error"
        " rate, disagreement, labelled error) or the interval's p99 (NaN: no data)",
        *_GATE,
    )
    threshold = gauge(
        "inferlane_rollout_gate_threshold",
        "The gate's threshold then (sequential gates: the limit they pass below)",
        *_GATE,
    )
    low = gauge("inferlane_rollout_gate_low", _BOUND_DOC.format(end="low"), *_GATE)
    high = gauge("inferlane_rollout_gate_high", _BOUND_DOC.format(end="high"), *_GATE)
    decisions = counter(
        "inferlane_rollout_decisions",
        "Rollout decisions this worker took (pass, wait, advance, promote, rollback)",
        "model",
        "decision",
    )
    dropped = counter(
        "inferlane_rollout_dropped_batches",
        "Finished batches left out of the rollout statistics (comparison queue full)",
        "model",
    )

    def show(self, r: RolloutRecord) -> None:
        self.share.labels(r.model, r.candidate_version, r.mode).set(r.share)
        for state in State:
            self.state.labels(r.model, r.candidate_version, state.value).set(r.state == state)

    def gates(self, r: RolloutRecord, values: list[GateValue]) -> None:
        for v in values:
            self.gate.labels(r.model, r.candidate_version, v.name).set(v.value)
            threshold = v.threshold if math.isfinite(v.threshold) else math.nan
            self.threshold.labels(r.model, r.candidate_version, v.name).set(threshold)
            self.low.labels(r.model, r.candidate_version, v.name).set(v.low)
            self.high.labels(r.model, r.candidate_version, v.name).set(v.high)
