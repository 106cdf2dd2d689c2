"""Prometheus metrics of the model store, on the worker's registry."""

from __future__ import annotations

from prometheus_client import Histogram

from worker.base.metric_set import Declared, MetricSet, counter, gauge, histogram
from worker.models.tiers import Tier

_SECONDS = (0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


def _seconds(name: str, doc: str) -> Declared[Histogram]:
    return histogram(name, doc, "model", buckets=_SECONDS)


class StoreMetrics(MetricSet):
    load = _seconds("inferlane_model_load_seconds", "Cold load from disk, with warm-up")
    promotion = _seconds("inferlane_model_promotion_seconds", "Host to device, with warm-up")
    eviction = _seconds(
        "inferlane_model_eviction_seconds", "Demotion or release, memory given back"
    )
    hits = counter(
        "inferlane_model_tier_hits", "Model uses found on the device or the host tier", "tier"
    )
    misses = counter("inferlane_model_tier_misses", "Model uses that loaded from disk")
    evictions = counter("inferlane_model_evictions", "Models moved down, by source tier", "tier")
    tier_bytes = gauge("inferlane_model_tier_bytes", "Measured bytes held per tier", "tier")
    budget_bytes = gauge("inferlane_model_tier_budget_bytes", "Byte budget per tier", "tier")
    load_failures = counter("inferlane_model_load_failures", "Failed loads, by model", "model")
    unavailable = gauge(
        "inferlane_model_unavailable",
        "1 while a model fails to load and is retried in the background",
        "model",
    )
    optimization_refused = counter(
        "inferlane_model_optimization_refused",
        "Optimized models refused (outputs differ from eager, or it failed); eager serves",
        "model",
        "reason",
    )
    reloads = counter(
        "inferlane_model_registry_reloads", "Registry file reloads, by result", "result"
    )

    def occupancy(self, used: dict[Tier, int], budgets: dict[Tier, int]) -> None:
        for tier, n in used.items():
            self.tier_bytes.labels(tier.value).set(n)
        for tier, n in budgets.items():
            self.budget_bytes.labels(tier.value).set(n)
