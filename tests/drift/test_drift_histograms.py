"""The distances on fixed bins, their bands, and window merging: pure functions."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from storage.drift_records import WindowStats, merge_windows
from storage.histograms import (
    bin_numeric,
    counts_of,
    jensen_shannon,
    kolmogorov_smirnov,
    psi,
    psi_level,
    quantile_edges,
)
from tests.drift.drift_factories import START
from worker.drift.views import Window, parse_span_s


def test_identical_histograms_are_at_distance_zero() -> None:
    counts = [100, 200, 300, 400]
    assert psi(counts, counts) == pytest.approx(0.0)
    assert jensen_shannon(counts, counts) == pytest.approx(0.0)
    assert kolmogorov_smirnov(counts, counts) == pytest.approx(0.0)


def test_disjoint_histograms_are_far_apart() -> None:
    assert psi([1000, 0], [0, 1000]) > 5
    assert jensen_shannon([1000, 0], [0, 1000]) > 0.99
    assert kolmogorov_smirnov([1000, 0], [0, 1000]) == pytest.approx(1.0)


def test_psi_bands() -> None:
    assert [psi_level(v) for v in (0.05, 0.1, 0.2, 0.25, 0.3)] == [
        "none",
        "moderate",
        "moderate",
        "moderate",
        "major",
    ]


def test_quantile_bins_split_the_reference_evenly() -> None:
    values = np.random.default_rng(0).normal(size=10_000)
    edges = quantile_edges(values, 10)
    counts = counts_of(bin_numeric(edges, values), len(edges) + 1)
    assert len(counts) == 10
    assert max(counts) - min(counts) <= 2
    assert bin_numeric(edges, np.array([-100.0, 100.0])).tolist() == [0, 9]


def _windows(rows: list[int]) -> list[WindowStats]:
    return [
        WindowStats("m", "1", START + timedelta(seconds=60 * i), 60, n, bins={"output": {0: n}})
        for i, n in enumerate(rows)
    ]


def test_merging_by_span_and_by_rows() -> None:
    by_span = merge_windows(_windows([10, 20, 30, 40, 50]), span_s=120)
    assert [(w.rows, w.span_s) for w in by_span] == [(30, 120), (70, 120), (50, 60)]
    assert by_span[0].bins == {"output": {0: 30}}
    by_rows = merge_windows(_windows([10, 20, 30, 40, 50]), min_rows=45)
    assert [w.rows for w in by_rows] == [60, 90]


def test_window_sizes_parse() -> None:
    assert parse_span_s("5m") == 300
    assert Window.parse("1h") == Window(span_s=3600)
    assert Window.parse("1000") == Window(rows=1000)
    with pytest.raises(ValueError, match="span"):
        Window.parse("soon")
