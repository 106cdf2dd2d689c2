"""The sparse priority scenario's pure parts: its gaps, the backlog's ratio to its solo
rate, and the judgment against issue 44's bounds."""

from __future__ import annotations

import pytest

from bench.scenarios.sparse_priority import GAP_S, gaps, judged, low_over_solo


def test_gaps_fill_the_window_each_alone_and_repeat_per_seed() -> None:
    drawn = gaps(3, 10.0)
    assert all(GAP_S[0] <= g <= GAP_S[1] for g in drawn)
    assert sum(drawn[:-1]) < 10.0 <= sum(drawn)
    assert gaps(3, 10.0) == drawn
    assert gaps(4, 10.0) != drawn


def test_each_window_is_set_beside_the_solo_windows_around_it() -> None:
    assert low_over_solo([90.0, 80.0], [100.0, 100.0, 60.0]) == pytest.approx([0.9, 1.0])


def test_a_window_beside_a_solo_window_without_a_rate_has_no_ratio() -> None:
    assert low_over_solo([90.0, 80.0], [0.0, 100.0, 60.0]) == pytest.approx([1.0])


def test_the_judgment_uses_the_idle_figures_of_the_same_run() -> None:
    m = {
        "p50_ms": 30.0,
        "p99_ms": 120.0,
        "extra": {
            "idle_p50_ms": 10.0,
            "idle_p99_ms": 25.0,
            "p50_bound_ms": 30.0,  # idle p50 + 20 ms
            "p99_bound_ms": 100.0,  # 2 x idle p99 + 50 ms
            "low_over_solo": 0.9,
        },
    }
    got = judged(m)
    assert got["high_p50_over_bound"] == pytest.approx(1.0)
    assert got["high_p99_over_bound"] == pytest.approx(1.2)
    assert got["low_over_solo"] == 0.9
