"""The step load's judgment: adaptive's cap settles, and its saturated throughput against
the best fixed cap comes from paired runs (median of each size's pair ratios)."""

from __future__ import annotations

from typing import Any

import pytest

from bench.scenarios import step_load


def _runs(cvs: list[float | None], pairs: dict[int, list[float]]) -> dict[str, dict[str, Any]]:
    runs: dict[str, dict[str, Any]] = {
        "inferlane-adaptive": {"extra": {"saturated": [{"cap_cv": cv} for cv in cvs]}},
        "inferlane-naive": {"extra": {"saturated": [{"cap_cv": 0.9}]}},
        "inferlane-adaptive-paired": {"extra": {"runs_rps": [1.0]}},
    }
    for size, ratios in pairs.items():
        runs[f"inferlane-fixed-{size}"] = {"extra": {"pair_ratios": ratios}}
    return runs


def test_the_best_fixed_cap_is_the_size_with_the_lowest_median_pair_ratio() -> None:
    # 128's pairs have the lowest median (0.97) though 256 holds the single lowest pair.
    judged = step_load.judged(
        _runs(
            [0.01, 0.04], {64: [1.10, 1.20, 1.05], 128: [0.96, 0.97, 1.02], 256: [0.90, 1.0, 1.0]}
        )
    )
    assert judged["adaptive_cap_cv_max"] == pytest.approx(0.04)
    assert judged["adaptive_over_best_fixed"] == pytest.approx(0.97)
    assert judged["adaptive_over_best_fixed_pairs_min"] == pytest.approx(0.96)
    assert judged["adaptive_over_best_fixed_pairs_max"] == pytest.approx(1.02)


def test_an_unsettled_phase_or_no_pairs_is_not_judged() -> None:
    judged = step_load.judged(_runs([0.01, None], {}))
    assert judged["adaptive_cap_cv_max"] is None
    assert judged["adaptive_over_best_fixed"] is None
    assert step_load.judged({}) == {}
