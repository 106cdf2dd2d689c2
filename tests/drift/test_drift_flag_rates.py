"""The drift flags' stated false-flag rate, on seeded windows through the real window
accumulator and ``evaluate`` (``bench.drift_flags`` measures the demo models' own
outputs, 1,000 windows each; these use synthetic ones, 300 windows, a looser bound)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.drift_flags import Served, window_verdict
from storage.drift_records import CATEGORICAL, NUMERIC
from worker.drift import critical
from worker.settings import DriftConfig
from worker.settings.drift_thresholds import DriftThresholds

WINDOWS = 300
POOL = 5000


def classifier(rng: np.random.Generator, error: float, *, shifted: bool = False) -> Served:
    """Ten classes, 64-feature digits-like inputs; ``shifted``: brighter inputs and
    one class predicted more often."""
    classes = rng.integers(0, 10, POOL)
    if shifted:
        classes = np.where(rng.random(POOL) < 0.3, 1, classes)
    return Served(
        "digits",
        CATEGORICAL,
        10,
        classes.astype(np.int64),
        rng.normal(7.0 if shifted else 5.0, 1.0, POOL),
        (rng.random(POOL) < error).astype(np.float64),
    )


def regressor(rng: np.random.Generator) -> Served:
    outputs = rng.gamma(4.0, 40.0, POOL)
    return Served(
        "diabetes",
        NUMERIC,
        0,
        outputs,
        rng.normal(0.0, 0.05, POOL),
        np.abs(rng.normal(0, 50, POOL)),
    )


def flagged(served: Served, window: Served, rows: int, thresholds: DriftThresholds) -> float:
    rng = np.random.default_rng(11)
    config = DriftConfig(thresholds=thresholds)
    hits = sum(bool(window_verdict(served, window, rows, config, rng)) for _ in range(WINDOWS))
    return hits / WINDOWS


@pytest.mark.parametrize("rows", [30, 100])
def test_in_distribution_windows_are_rarely_flagged(rows: int) -> None:
    # At 30 rows, the thresholds alone flagged about a quarter of these windows.
    t = DriftThresholds(min_rows=30)
    rng = np.random.default_rng(3)
    for served in (classifier(rng, 0.03), regressor(rng)):
        assert flagged(served, served, rows, t) <= 0.02  # stated: at most 1%


def test_a_model_at_its_error_threshold_is_rarely_flagged() -> None:
    """True error exactly ``error_rate_max``: a threshold on the window's share alone
    flags about every other window of 40 labels."""
    served = classifier(np.random.default_rng(4), 0.25)
    assert flagged(served, served, 40, DriftThresholds(min_rows=10_000)) <= 0.02


def test_a_shift_is_caught_in_small_windows() -> None:
    rng = np.random.default_rng(5)
    clean, shifted = classifier(rng, 0.03), classifier(rng, 0.03, shifted=True)
    assert flagged(clean, shifted, 100, DriftThresholds()) >= 0.99


def test_chance_thresholds_shrink_with_the_window_and_the_test_count() -> None:
    small, large = critical.psi(100, 500, 10, 0.002), critical.psi(10_000, 500, 10, 0.002)
    assert small > 0.25 > large  # at 100 rows chance alone passes the default psi_max
    assert critical.kolmogorov_smirnov(100, 500, 0.01) > critical.kolmogorov_smirnov(
        1000, 500, 0.01
    )
    assert critical.error_rate(40, 0.25, 0.01) > critical.error_rate(4000, 0.25, 0.01) > 0.25
