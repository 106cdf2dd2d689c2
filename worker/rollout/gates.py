"""The gates: a rollout's counts against the thresholds, one verdict per gate.

Error rate, disagreement and labelled error are sequential tests on the counts of the
whole rollout so far (``confidence``): each fails once its confidence sequence lies
wholly above the allowed level, passes once it lies wholly below the limit, and waits
in between. The three share ``alpha``. The p99 gate compares the current interval's
latencies. Pure: counts in, verdicts out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from worker.rollout.confidence import Bounds, difference_bounds, mean_bounds
from worker.rollout.stats import VersionStats
from worker.settings.rollout_plan import Gates

SEQUENTIAL_TESTS = 3  # error rate, disagreement, labelled error: they share alpha


class Verdict(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    WAIT = "wait"  # undecided: not enough data yet


@dataclass(frozen=True, slots=True)
class Measures:
    """How the model's adapter measures what the gates test."""

    binary_labels: bool  # classifiers: each labelled answer is right or wrong
    disagreement_bound: float | None  # per-input disagreement lies in [0, bound]; None: unbounded


@dataclass(frozen=True, slots=True)
class Pair:
    primary: VersionStats
    candidate: VersionStats


@dataclass(frozen=True, slots=True)
class GateValue:
    name: str
    value: float  # the estimate; NaN without data
    threshold: float  # passes below it (sequential gates: the limit)
    verdict: Verdict
    required: bool = True  # False: an interval may pass while this gate waits
    anytime: bool = False  # True: its failure holds at any look, not only an interval's end
    # Sequential gates: the confidence sequence now, and the level it fails above.
    low: float = math.nan
    high: float = math.nan
    allowed: float = math.nan

    def describe(self) -> str:
        if math.isnan(self.allowed):
            return f"{self.name} {self.value:.4g} > {self.threshold:.4g}"
        return (
            f"{self.name} {self.value:.4g} (confidence sequence {self.low:.4g}..{self.high:.4g})"
            f" > allowed {self.allowed:.4g}"
        )

    def as_json(self) -> dict[str, object]:
        """JSON has no NaN or infinity: those are null (the verdict says which)."""
        out: dict[str, object] = {
            "value": _finite(self.value),
            "threshold": _finite(self.threshold),
            "verdict": self.verdict.value,
        }
        if not math.isnan(self.allowed):
            out |= {"low": _finite(self.low), "high": _finite(self.high), "allowed": self.allowed}
        return out


def evaluate(interval: Pair, rollout: Pair, gates: Gates, measures: Measures) -> list[GateValue]:
    """The gates on the current interval's counts (p99) and the rollout's (the rest)."""
    alpha = gates.alpha / SEQUENTIAL_TESTS
    p, c = rollout.primary, rollout.candidate
    error_rate = _sequential(
        "error_rate_increase",
        c.error_rate - p.error_rate,
        difference_bounds(c.errors, c.requests, p.errors, p.requests, alpha),
        gates.allowed_error_rate_increase,
        gates.max_error_rate_increase,
    )
    return [
        error_rate,
        _p99(interval, gates),
        _disagreement(c, gates, measures, alpha),
        _label_error(rollout, gates, measures, alpha),
    ]


def overall(values: list[GateValue]) -> Verdict:
    """FAIL if any gate fails; WAIT if a required one waits; else PASS."""
    if any(v.verdict is Verdict.FAIL for v in values):
        return Verdict.FAIL
    if any(v.verdict is Verdict.WAIT and v.required for v in values):
        return Verdict.WAIT
    return Verdict.PASS


def _p99(interval: Pair, gates: Gates) -> GateValue:
    p, c = interval.primary, interval.candidate
    limit = p.p99_ms() * gates.max_p99_ratio + gates.p99_slack_ms
    enough = min(p.requests, c.requests) >= gates.min_requests
    return _point("p99_ms", c.p99_ms(), limit, enough)


def _disagreement(c: VersionStats, gates: Gates, m: Measures, alpha: float) -> GateValue:
    name, value = "disagreement", c.disagreement
    if m.disagreement_bound is None:
        return _point(name, value, gates.max_disagreement, c.compared >= gates.min_compared)
    if not math.isfinite(c.disagreement_sum):  # outputs that cannot be compared
        return _point(name, value, gates.max_disagreement, True)
    # Values in [0, bound]: the sequence for their share of the bound, scaled back.
    bound = m.disagreement_bound
    share = mean_bounds(c.disagreement_sum / bound, c.compared, alpha)
    bounds = Bounds(share.low * bound, share.high * bound)
    return _sequential(name, value, bounds, gates.allowed_disagreement, gates.max_disagreement)


def _label_error(rollout: Pair, gates: Gates, m: Measures, alpha: float) -> GateValue:
    """Required once either version has labelled answers: traffic without labels
    advances on the other gates."""
    p, c = rollout.primary, rollout.candidate
    name, required = "label_error_increase", p.labelled + c.labelled > 0
    if m.binary_labels:
        bounds = difference_bounds(c.wrong, c.labelled, p.wrong, p.labelled, alpha)
        value = c.wrong_rate - p.wrong_rate
        allowed, limit = gates.allowed_label_error_increase, gates.max_label_error_increase
        return _sequential(name, value, bounds, allowed, limit, required=required)
    value = _relative(c.mean_abs_error, p.mean_abs_error)
    enough = min(p.labelled, c.labelled) >= gates.min_labelled
    return _point(name, value, gates.max_label_error_increase, enough, required=required)


def _sequential(
    name: str, value: float, bounds: Bounds, allowed: float, limit: float, *, required: bool = True
) -> GateValue:
    if bounds.low > allowed:
        verdict = Verdict.FAIL
    elif bounds.high < limit:
        verdict = Verdict.PASS
    else:
        verdict = Verdict.WAIT
    return GateValue(
        name,
        value,
        limit,
        verdict,
        required,
        anytime=True,
        low=bounds.low,
        high=bounds.high,
        allowed=allowed,
    )


def _point(
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
