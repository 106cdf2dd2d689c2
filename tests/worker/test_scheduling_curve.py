"""ThroughputCurve and BusyWindow: what the controller learns and sees."""

from __future__ import annotations

import pytest

from worker.scheduling.curve import MIN_SAMPLES, ThroughputCurve
from worker.scheduling.probes import BusyWindow, open_probe


def measured(points: dict[int, float], times: int = MIN_SAMPLES) -> ThroughputCurve:
    curve = ThroughputCurve()
    for _ in range(times):
        for size, seconds in points.items():
            curve.record(size, seconds, 0.0)
    return curve


def test_a_size_counts_only_after_enough_batches() -> None:
    curve = measured({8: 0.01}, times=MIN_SAMPLES - 1)
    assert curve.rate(8) is None and curve.best(target_ms=100, max_size=64) is None
    curve.record(8, 0.01, 1.0)
    assert curve.rate(8) == pytest.approx(800)
    assert curve.tail_ms(8) == pytest.approx(10)


def test_best_is_the_fastest_size_within_the_latency_target() -> None:
    curve = measured({8: 0.010, 32: 0.020, 64: 0.080})  # 800, 1600, 800 items/s
    assert curve.best(target_ms=100, max_size=256) == 32
    assert curve.best(target_ms=15, max_size=256) == 8
    assert curve.best(target_ms=100, max_size=16) == 8


def test_slice_size_scales_from_the_largest_fitting_size_and_stays_below_a_slow_one() -> None:
    curve = measured({4: 0.004, 8: 0.008, 64: 0.064})
    assert curve.slice_size(10) == 10  # 8 items in 8 ms: 10 in 10 ms
    assert curve.slice_size(100) == 100
    assert measured({4: 0.004, 16: 0.032}).slice_size(10) == 10
    assert measured({16: 0.032}).slice_size(10) == 5  # below every measured size
    assert measured({4: 0.004, 12: 0.011}).slice_size(10) == 10
    assert ThroughputCurve().slice_size(10) is None


def test_busy_window_is_the_busy_fraction_of_the_last_window() -> None:
    probe = BusyWindow(window_s=1.0)
    assert probe.utilization(0.0) is None
    probe.ran(0.0, 0.5)
    probe.ran(0.6, 0.8)
    assert probe.utilization(1.0) == pytest.approx(0.7)
    assert probe.utilization(1.5) == pytest.approx(0.2)  # only 0.6-0.8 is in the window
    assert probe.utilization(3.0) == 0.0


def test_without_cuda_or_nvml_the_cpu_probe_serves_without_error() -> None:
    assert isinstance(open_probe(cuda_index=None, window_s=1.0, nvml_every_s=0.5), BusyWindow)
    # A CUDA index where NVML has no library or no device falls back too.
    probe = open_probe(cuda_index=99, window_s=1.0, nvml_every_s=0.5)
    try:
        assert probe.utilization(0.0) is None or 0.0 <= probe.utilization(0.0) <= 1.0  # type: ignore[operator]
    finally:
        probe.close()


def test_floor_is_the_expected_tail_of_a_batch_of_one() -> None:
    assert measured({8: 0.010}).floor_ms() is None  # one size: no line yet
    assert measured({8: 0.010, 16: 0.018}).floor_ms() == pytest.approx(3.0)
    assert measured({8: 0.010, 16: 0.009}).floor_ms() == pytest.approx(9.5)  # no slope < 0
