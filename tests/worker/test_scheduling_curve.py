"""ThroughputCurve and BusyWindow: what the controller learns and sees."""

from __future__ import annotations

import pytest

from consumers.contract import Priority
from worker.scheduling.curve import MIN_SAMPLES, RateStats, ThroughputCurve, beats
from worker.scheduling.probes import BusyWindow, open_probe


def measured(points: dict[int, float], times: int = MIN_SAMPLES) -> ThroughputCurve:
    curve = ThroughputCurve()
    for _ in range(times):
        for size, seconds in points.items():
            curve.record(size, seconds, 0.0)
    return curve


def test_a_size_counts_only_after_enough_batches() -> None:
    curve = measured({8: 0.01}, times=MIN_SAMPLES - 1)
    assert curve.rate_stats(8) is None and curve.tail_ms(8) is None
    curve.record(8, 0.01, 1.0)
    assert curve.rate_stats(8) == RateStats(800.0, 0.0, MIN_SAMPLES)
    assert curve.tail_ms(8) == pytest.approx(10)


def test_a_new_batch_moves_the_cached_quantiles() -> None:
    curve = measured({8: 0.01})
    assert curve.tail_ms(8) == pytest.approx(10)
    curve.record(8, 0.05, 1.0)
    assert curve.tail_ms(8) == pytest.approx(50)


def figures(stats: RateStats | None) -> tuple[float, float, int]:
    assert stats is not None
    return stats.mean, stats.spread, stats.n


def test_rate_stats_reads_the_latest_batches_since_a_clock() -> None:
    curve = ThroughputCurve()
    for at, seconds in enumerate((0.1, 0.1, 0.1, 0.01, 0.02, 0.01, 0.02)):
        curve.record(1, seconds, float(at))
    assert figures(curve.rate_stats(1, since_s=3.0)) == pytest.approx((75, 0.385, 4), abs=1e-3)
    assert figures(curve.rate_stats(1, last=3)) == pytest.approx((200 / 3, 0.433, 3), abs=1e-3)
    assert curve.rate_stats(1, since_s=5.0) is None  # two batches only


def test_a_rate_is_work_per_second_where_batches_carry_work() -> None:
    """Text batches of one size, one band of lengths each: 8 then 40 tokens an item at
    the same 4,000 tokens/s. Their items/s differ fivefold, their work/s not at all."""
    curve = ThroughputCurve()
    for at, tokens in enumerate((8, 40, 8, 40)):
        curve.record(16, 16 * tokens / 4000, float(at), work=16 * tokens)
    assert figures(curve.rate_stats(16)) == pytest.approx((4000, 0.0, 4))
    curve.record(4, 0.002, 5.0)  # no work given: the items are the work
    curve.record(4, 0.002, 6.0)
    curve.record(4, 0.004, 7.0)
    assert figures(curve.rate_stats(4)) == pytest.approx((5000 / 3, 0.346, 3), abs=1e-3)


def test_beats_needs_the_margin_and_the_noise() -> None:
    quiet, base = RateStats(1100, 0.0, 16), RateStats(1000, 0.0, 16)
    assert beats(quiet, base, margin=0.03, z=2) and not beats(base, quiet, margin=0.03, z=2)
    assert not beats(quiet, base, margin=0.2, z=2)
    # 15% noise per batch: three batches cannot tell 10% apart, sixty-four can.
    assert not beats(RateStats(1100, 0.15, 3), RateStats(1000, 0.15, 3), margin=0.03, z=2)
    assert beats(RateStats(1100, 0.15, 64), RateStats(1000, 0.15, 64), margin=0.03, z=2)
    # The spread is pooled: three quiet batches prove nothing on a noisy machine.
    assert not beats(RateStats(1100, 0.0, 3), RateStats(1000, 0.15, 64), margin=0.03, z=2)


def test_size_within_scales_from_the_largest_fitting_size_and_stays_below_a_slow_one() -> None:
    curve = measured({4: 0.004, 8: 0.008, 64: 0.064})
    assert curve.size_within(10) == 10  # 8 items in 8 ms: 10 in 10 ms
    assert curve.size_within(100) == 100
    assert measured({4: 0.004, 16: 0.032}).size_within(10) == 10
    assert measured({16: 0.032}).size_within(10) == 5  # below every measured size
    assert measured({4: 0.004, 12: 0.011}).size_within(10) == 10
    assert ThroughputCurve().size_within(10) is None


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


def test_busy_window_of_lanes_apart_is_the_busiest_lanes_fraction() -> None:
    probe = BusyWindow(window_s=1.0)
    probe.ran(0.0, 0.7, Priority.LOW)
    probe.ran(0.1, 0.2, Priority.HIGH)
    probe.ran(0.75, 0.9, Priority.HIGH)
    assert probe.utilization(1.0) == pytest.approx(0.7)  # not 0.95: the threads run apart
    probe.ran(0.9, 1.0, Priority.LOW)
    assert probe.utilization(1.0) == pytest.approx(0.8)
