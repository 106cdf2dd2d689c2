"""What one version did in one analysis interval: counts that add up across workers.

Latency goes into fixed log-spaced bins, so the p99 of the whole group is the p99 of
the summed histograms.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime

from storage.rollouts import RolloutStats

# Bin upper edges in ms: 0.05 ms .. ~100 s, 10 bins per decade (a p99 within ~26%).
LATENCY_EDGES_MS: tuple[float, ...] = tuple(0.05 * 10 ** (i / 10) for i in range(64))


@dataclass(slots=True)
class VersionStats:
    """Its fields are the counts of a stored ``RolloutStats`` row, by name."""

    requests: int = 0  # results computed by this version
    errors: int = 0  # of them, errors (the model raised, or returned non-finite values)
    latency_bins: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_EDGES_MS) + 1))
    compared: int = 0  # inputs also computed by the other version
    disagreement_sum: float = 0.0
    labelled: int = 0  # results whose request carried ``expected``
    wrong: int = 0  # of them, |output - expected| > 0.5 (the anomaly predicate)
    abs_error_sum: float = 0.0

    @classmethod
    def from_row(cls, row: RolloutStats) -> VersionStats:
        return cls(**{f.name: getattr(row, f.name) for f in fields(cls)})

    def as_row(
        self, rollout_id: int, interval_start: datetime, role: str, worker: str
    ) -> RolloutStats:
        return RolloutStats(rollout_id, interval_start, role, worker, **asdict(self))

    def add_latency(self, ms: float, count: int = 1) -> None:
        self.latency_bins[bisect.bisect_left(LATENCY_EDGES_MS, ms)] += count

    def add_label(self, error: float) -> None:
        """One labelled answer, by its drift-log ``error`` (a classifier's is 0 or 1)."""
        error = abs(error)
        self.labelled += 1
        self.wrong += error > 0.5
        self.abs_error_sum += error

    def merge(self, other: VersionStats) -> None:
        self.requests += other.requests
        self.errors += other.errors
        if other.latency_bins:  # a row written without latencies has none
            bins = zip(self.latency_bins, other.latency_bins, strict=True)
            self.latency_bins = [a + b for a, b in bins]
        self.compared += other.compared
        self.disagreement_sum += other.disagreement_sum
        self.labelled += other.labelled
        self.wrong += other.wrong
        self.abs_error_sum += other.abs_error_sum

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else math.nan

    @property
    def disagreement(self) -> float:
        return self.disagreement_sum / self.compared if self.compared else math.nan

    @property
    def wrong_rate(self) -> float:
        return self.wrong / self.labelled if self.labelled else math.nan

    @property
    def mean_abs_error(self) -> float:
        return self.abs_error_sum / self.labelled if self.labelled else math.nan

    def p99_ms(self) -> float:
        """The upper edge of the bin holding the 99th percentile (NaN without data)."""
        total = sum(self.latency_bins)
        if not total:
            return math.nan
        rank, seen = math.ceil(0.99 * total), 0
        for i, count in enumerate(self.latency_bins):
            seen += count
            if seen >= rank:
                return LATENCY_EDGES_MS[i] if i < len(LATENCY_EDGES_MS) else math.inf
        return math.inf  # unreachable: the bins sum to total
