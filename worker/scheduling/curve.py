"""The throughput curve: work/s and forward-pass times per batch size, learned online.

Pure bookkeeping: batches are recorded with their size, work, compute time and a clock
reading; nothing here reads a clock. The best batch size moves from run to run
(minilm's between 8 and 64 on one machine), so it is measured, never configured.
Rates are compared with their noise (``beats``): on a shared CPU, neighbouring sizes
often differ by less than one batch's rate varies from batch to batch.

A batch's work is the sum of its items' costs (``Adapter.cost``): items for fixed-size
inputs, tokens for text. Length-grouped text batches each hold one band of lengths, so
their items/s follow the band (minilm's varied by 45-47% from batch to batch, their
tokens/s by 6.5-8%: ``python -m bench.batch_rates``); over a steady workload the size
with the most tokens/s is the size with the most items/s.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

_KEEP = 64  # recent forward passes per size (percentiles)
RECENT = 16  # the latest batches at a size its rate is taken from
MIN_SAMPLES = 3  # batches at a size before its figures count


@dataclass(frozen=True, slots=True)
class RateStats:
    """Work/s over some recent batches at one size."""

    mean: float
    spread: float  # standard deviation of one batch's rate, relative to the mean
    n: int  # batches


def beats(a: RateStats, b: RateStats, *, margin: float, z: float) -> bool:
    """Whether ``a``'s mean rate is above ``b``'s by more than ``margin`` (relative to
    ``b``) and by more than ``z`` standard errors of the difference (a one-sided test).
    The relative spread is pooled over both: the noise is the machine's, common to both
    sizes, and a spread from three batches alone can be small or large by chance."""
    spread = math.sqrt(((a.n - 1) * a.spread**2 + (b.n - 1) * b.spread**2) / (a.n + b.n - 2))
    noise = z * spread * math.sqrt(a.mean**2 / a.n + b.mean**2 / b.n)
    return a.mean > b.mean * (1 + margin) and a.mean - b.mean > noise


@dataclass(slots=True)
class SizeStats:
    compute_s: deque[float] = field(default_factory=lambda: deque(maxlen=_KEEP))
    work: deque[float] = field(default_factory=lambda: deque(maxlen=_KEEP))  # their work
    at_s: deque[float] = field(default_factory=lambda: deque(maxlen=_KEEP))  # their clocks
    _ordered: list[float] | None = None  # compute_s sorted, kept until the next batch

    def add(self, compute_s: float, work: float, now_s: float) -> None:
        self.compute_s.append(compute_s)
        self.work.append(work)
        self.at_s.append(now_s)
        self._ordered = None

    def quantile_s(self, q: float) -> float:
        # Cached: the scheduler's limit() asks for quantiles on every batch plan.
        if self._ordered is None:
            self._ordered = sorted(self.compute_s)
        return self._ordered[min(len(self._ordered) - 1, int(q * len(self._ordered)))]


class ThroughputCurve:
    def __init__(self) -> None:
        self._sizes: dict[int, SizeStats] = {}
        self.recorded = 0  # batches recorded, every size

    def record(self, size: int, compute_s: float, now_s: float, work: float | None = None) -> None:
        """One batch of ``size`` items; ``work``: their costs summed (None: ``size``)."""
        if size < 1 or compute_s <= 0:
            return
        stats = self._sizes.setdefault(size, SizeStats())
        stats.add(compute_s, size if work is None else work, now_s)
        self.recorded += 1

    def _known(self, size: int) -> SizeStats | None:
        stats = self._sizes.get(size)
        return stats if stats is not None and len(stats.compute_s) >= MIN_SAMPLES else None

    def samples(self, size: int) -> int:
        stats = self._sizes.get(size)
        return 0 if stats is None else len(stats.compute_s)

    def rate_stats(
        self, size: int, *, since_s: float = -math.inf, last: int = RECENT
    ) -> RateStats | None:
        """Work/s of the ``last`` batches at ``size`` that ended at or after ``since_s``.
        None: fewer than ``MIN_SAMPLES`` such batches."""
        stats = self._sizes.get(size)
        if stats is None:
            return None
        batches = zip(stats.compute_s, stats.work, stats.at_s, strict=True)
        rates = [w / c for c, w, at in batches if at >= since_s][-last:]
        if len(rates) < MIN_SAMPLES:
            return None
        mean = sum(rates) / len(rates)
        variance = sum((r - mean) ** 2 for r in rates) / (len(rates) - 1)
        return RateStats(mean, math.sqrt(variance) / mean, len(rates))

    def count(self, size: int, *, since_s: float) -> int:
        """Batches at ``size`` (of the last 64) that ended at or after ``since_s``."""
        stats = self._sizes.get(size)
        return 0 if stats is None else sum(at >= since_s for at in stats.at_s)

    def seen_s(self, size: int) -> float | None:
        stats = self._known(size)
        return None if stats is None else stats.at_s[-1]

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

    def size_within(self, ms: float, quantile: float = 0.5) -> int | None:
        """The largest size whose forward passes' ``quantile`` (default: the median)
        should fit in ``ms`` (a lane's latency target, a slice).

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
        fitting = [size for size, took in medians.items() if took <= ms]
        too_long = [size for size, took in medians.items() if took > ms]
        base = max(fitting) if fitting else min(too_long)
        estimate = int(base * ms / max(medians[base], 1e-6))
        if too_long:
            estimate = min(estimate, min(too_long) - 1)
        return max(1, estimate, max(fitting, default=1))
