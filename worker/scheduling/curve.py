"""The throughput curve: items/s and forward-pass times per batch size, learned online.

Pure bookkeeping: batches are recorded with their size, compute time and a clock
reading; nothing here reads a clock. The best batch size moves from run to run
(minilm's between 8 and 64 on one machine), so it is measured, never configured.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

_KEEP = 64  # recent forward passes per size (percentiles)
_ALPHA = 0.3  # EWMA weight of the newest batch in the rate
MIN_SAMPLES = 3  # batches at a size before its figures count


@dataclass(slots=True)
class SizeStats:
    rate: float  # items/s, EWMA
    seen_s: float  # clock of the last batch at this size
    compute_s: deque[float] = field(default_factory=lambda: deque(maxlen=_KEEP))

    def quantile_s(self, q: float) -> float:
        ordered = sorted(self.compute_s)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class ThroughputCurve:
    def __init__(self) -> None:
        self._sizes: dict[int, SizeStats] = {}

    def record(self, size: int, compute_s: float, now_s: float) -> None:
        if size < 1 or compute_s <= 0:
            return
        rate = size / compute_s
        stats = self._sizes.get(size)
        if stats is None:
            stats = self._sizes[size] = SizeStats(rate, now_s)
        else:
            stats.rate += _ALPHA * (rate - stats.rate)
            stats.seen_s = now_s
        stats.compute_s.append(compute_s)

    def _known(self, size: int) -> SizeStats | None:
        stats = self._sizes.get(size)
        return stats if stats is not None and len(stats.compute_s) >= MIN_SAMPLES else None

    def samples(self, size: int) -> int:
        stats = self._sizes.get(size)
        return 0 if stats is None else len(stats.compute_s)

    def rate(self, size: int) -> float | None:
        stats = self._known(size)
        return None if stats is None else stats.rate

    def seen_s(self, size: int) -> float | None:
        stats = self._known(size)
        return None if stats is None else stats.seen_s

    def tail_ms(self, size: int) -> float | None:
        """The 95th percentile of recent forward passes at ``size``: the latency guard's
        figure (a p99 of 64 samples is their maximum, one hiccup of a shared CPU)."""
        stats = self._known(size)
        return None if stats is None else 1000 * stats.quantile_s(0.95)

    def floor_ms(self) -> float | None:
        """The tail a batch of one is expected to take: the intercept of a least-squares
        line through the measured sizes' tails (time per item clamped at >= 0). None:
        fewer than two sizes measured."""
        points = [
            (size, 1000 * stats.quantile_s(0.95))
            for size, stats in self._sizes.items()
            if len(stats.compute_s) >= MIN_SAMPLES
        ]
        if len(points) < 2:
            return None
        mean_x = sum(x for x, _ in points) / len(points)
        mean_y = sum(y for _, y in points) / len(points)
        var_x = sum((x - mean_x) ** 2 for x, _ in points)
        slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / var_x if var_x else 0.0
        slope = max(0.0, slope)
        return mean_y - slope * (mean_x - 1)

    def best(self, *, target_ms: float, max_size: int) -> int | None:
        """The measured size with the most items/s whose tail meets the target."""
        fits = [
            (stats.rate, size)
            for size, stats in self._sizes.items()
            if size <= max_size
            and len(stats.compute_s) >= MIN_SAMPLES
            and 1000 * stats.quantile_s(0.95) <= target_ms
        ]
        return max(fits)[1] if fits else None

    def slice_size(self, slice_ms: float, quantile: float = 0.5) -> int | None:
        """The largest size whose forward passes' ``quantile`` (default: the median)
        should fit in ``slice_ms``.

        Scaled from the largest measured size that fits (time per item falls with size,
        so the estimate errs small, and the next measurement moves it up), kept below the
        smallest measured size that does not. None: nothing measured yet.
        """
        medians = {
            size: 1000 * stats.quantile_s(quantile)
            for size, stats in self._sizes.items()
            if len(stats.compute_s) >= MIN_SAMPLES
        }
        if not medians:
            return None
        fitting = [size for size, ms in medians.items() if ms <= slice_ms]
        too_long = [size for size, ms in medians.items() if ms > slice_ms]
        base = max(fitting) if fitting else min(too_long)
        estimate = int(base * slice_ms / max(medians[base], 1e-6))
        if too_long:
            estimate = min(estimate, min(too_long) - 1)
        return max(1, estimate, max(fitting, default=1))
