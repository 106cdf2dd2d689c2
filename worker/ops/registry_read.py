"""Read a Prometheus registry generically: samples by name, histogram quantiles."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Every sample of a registry at one moment, with the family types."""

    samples: list[Sample]
    types: dict[str, str]  # family name -> counter, gauge, histogram...

    @classmethod
    def of(cls, registry: CollectorRegistry) -> Snapshot:
        samples: list[Sample] = []
        types: dict[str, str] = {}
        for family in registry.collect():
            types[family.name] = family.type
            samples.extend(Sample(s.name, s.labels, s.value) for s in family.samples)
        return cls(samples, types)

    def named(self, name: str) -> Iterable[Sample]:
        return (s for s in self.samples if s.name == name)

    def total(self, name: str, by: str) -> dict[str, float]:
        """Sum of a sample over every label but ``by``."""
        out: dict[str, float] = {}
        for s in self.named(name):
            key = s.labels.get(by, "")
            out[key] = out.get(key, 0.0) + s.value
        return out

    def buckets(self, histogram: str, by: str) -> dict[str, dict[float, float]]:
        """Cumulative bucket counts ``{label value: {le: count}}``, summed over the rest."""
        out: dict[str, dict[float, float]] = {}
        for s in self.named(f"{histogram}_bucket"):
            per = out.setdefault(s.labels.get(by, ""), {})
            le = float(s.labels["le"])
            per[le] = per.get(le, 0.0) + s.value
        return out


def quantile(q: float, cumulative: Mapping[float, float]) -> float | None:
    """``histogram_quantile`` as Prometheus computes it: linear within the bucket.

    None without observations; the highest finite bound when it falls in +Inf.
    """
    bounds = sorted(cumulative)
    if not bounds or cumulative[bounds[-1]] <= 0:
        return None
    rank = q * cumulative[bounds[-1]]
    lower_bound, lower_count = 0.0, 0.0
    for bound in bounds:
        count = cumulative[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (
                count - lower_count
            )
        lower_bound, lower_count = bound, count
    return lower_bound


def minus(now: Mapping[float, float], before: Mapping[float, float]) -> dict[float, float]:
    """Buckets observed between two snapshots (counters restart at zero: keep ``now``)."""
    delta = {le: n - before.get(le, 0.0) for le, n in now.items()}
    return dict(now) if any(v < 0 for v in delta.values()) else delta
