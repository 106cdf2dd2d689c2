"""The gates' stated error rates, on seeded simulations through the real gate and
decision code (``bench.rollout_gates``; the bench runs 1,000 rollouts a scenario with
the default plan, these 300 with a quicker one and a looser bound)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.special import betaln

from bench.rollout_gates import Scenario, Traffic, simulate
from worker.rollout.confidence import mean_bounds
from worker.settings.rollout_plan import RolloutPlan, State

QUICK = RolloutPlan(steps=[5, 100], interval_s=10, passes=1, sample=1.0)
TRAFFIC = Traffic(rate=1000.0, max_s=3600.0)


@pytest.mark.parametrize("accuracy", [0.97, 0.994])
def test_an_equivalent_candidate_is_promoted_and_rarely_rolled_back(accuracy: float) -> None:
    summary = simulate(Scenario("equivalent", accuracy), 300, plan=QUICK, traffic=TRAFFIC)
    assert summary.share(State.ROLLED_BACK) <= 0.02  # stated: at most 1%
    assert summary.share(State.PROMOTED) == 1.0 - summary.share(State.ROLLED_BACK)


@pytest.mark.parametrize("accuracy", [0.97, 0.994])
@pytest.mark.parametrize(("worse_by", "disagreement"), [(0.05, 0.0), (0.0, 0.05)])
def test_a_worse_candidate_is_rolled_back(
    accuracy: float, worse_by: float, disagreement: float
) -> None:
    scenario = Scenario("worse", accuracy, worse_by=worse_by, disagreement=disagreement)
    summary = simulate(scenario, 300, plan=QUICK, traffic=TRAFFIC)
    assert summary.share(State.ROLLED_BACK) >= 0.97  # stated: at least 99%


def test_the_confidence_sequence_holds_the_mean_at_every_look() -> None:
    """Sequences of values in [0, 1] (0/1 and spread), looked at every 10 values: the
    true mean leaves the interval at some look in at most alpha of them."""
    alpha, misses = 0.05, 0
    rng = np.random.default_rng(7)
    for i in range(300):
        if i % 2:
            values = (rng.random(2000) < 0.03).astype(float)
            mean = 0.03
        else:
            values = rng.uniform(0.0, 0.2, 2000)
            mean = 0.1
        sums = np.cumsum(values)
        for n in range(10, 2001, 10):
            b = mean_bounds(float(sums[n - 1]), n, alpha)
            if not b.low <= mean <= b.high:
                misses += 1
                break
    assert misses <= alpha * 300


@pytest.mark.parametrize(
    ("total", "n", "alpha"),
    [(0, 300, 0.01), (3, 100, 0.001), (30, 1000, 0.003), (600, 20_000, 0.01), (99.5, 100, 0.1)],
)
def test_the_bounds_are_where_the_mixture_reaches_one_over_alpha(
    total: float, n: int, alpha: float
) -> None:
    def excess(p: float) -> float:
        mix = betaln(0.5 + total, 0.5 + n - total) - betaln(0.5, 0.5)
        return float(mix) - total * math.log(p) - (n - total) * math.log1p(-p) - math.log(1 / alpha)

    got = mean_bounds(total, n, alpha)
    estimate = total / n
    low = brentq(excess, 1e-12, estimate) if total else 0.0
    high = brentq(excess, max(estimate, 1e-12), 1 - 1e-12)
    assert math.isclose(got.low, low, rel_tol=1e-7, abs_tol=1e-12)
    assert math.isclose(got.high, high, rel_tol=1e-7)
