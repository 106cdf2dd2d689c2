"""The gates: each interval's numbers against the thresholds, one verdict per gate."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from worker.rollout.plan import Gates
from worker.rollout.stats import VersionStats


class Verdict(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    WAIT = "wait"  # not enough data in the interval yet


@dataclass(frozen=True, slots=True)
class GateValue:
    name: str
    value: float  # NaN while waiting
    threshold: float
    verdict: Verdict
    required: bool = True  # False: an interval may pass while this gate waits

    def describe(self) -> str:
        return f"{self.name} {self.value:.4g} > {self.threshold:.4g}"

    def as_json(self) -> dict[str, object]:
        """JSON has no NaN or infinity: those are null (the verdict says which)."""
        return {
            "value": _finite(self.value),
            "threshold": _finite(self.threshold),
            "verdict": self.verdict.value,
        }


def evaluate(
    primary: VersionStats, candidate: VersionStats, gates: Gates, *, classifier: bool
) -> list[GateValue]:
    """The gates for one interval. ``classifier``: labelled error is the misclassified
    share; otherwise the mean absolute error, relative to the primary's."""
    enough = min(primary.requests, candidate.requests) >= gates.min_requests
    error_increase = candidate.error_rate - primary.error_rate
    p99_limit = primary.p99_ms() * gates.max_p99_ratio + gates.p99_slack_ms
    labelled = min(primary.labelled, candidate.labelled) >= gates.min_labelled
    if classifier:
        label_increase = candidate.wrong_rate - primary.wrong_rate
    else:
        label_increase = _relative(candidate.mean_abs_error, primary.mean_abs_error)
    return [
        _gate("error_rate_increase", error_increase, gates.max_error_rate_increase, enough),
        _gate("p99_ms", candidate.p99_ms(), p99_limit, enough),
        _gate(
            "disagreement",
            candidate.disagreement,
            gates.max_disagreement,
            candidate.compared >= gates.min_compared,
        ),
        _gate(
            "label_error_increase",
            label_increase,
            gates.max_label_error_increase,
            labelled,
            required=False,
        ),
    ]


def overall(values: list[GateValue]) -> Verdict:
    """FAIL if any gate fails; WAIT if a required one waits; else PASS."""
    if any(v.verdict is Verdict.FAIL for v in values):
        return Verdict.FAIL
    if any(v.verdict is Verdict.WAIT and v.required for v in values):
        return Verdict.WAIT
    return Verdict.PASS


def _gate(
    name: str, value: float, threshold: float, enough: bool, *, required: bool = True
) -> GateValue:
    if not enough:
        return GateValue(name, math.nan, threshold, Verdict.WAIT, required)
    passed = value <= threshold  # NaN (e.g. a NaN error) fails
    return GateValue(name, value, threshold, Verdict.PASS if passed else Verdict.FAIL, required)


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _relative(value: float, baseline: float) -> float:
    if baseline == 0.0:
        return 0.0 if value == 0.0 else math.inf
    return value / baseline - 1.0
