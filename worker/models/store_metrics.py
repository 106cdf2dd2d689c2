"""Prometheus metrics of the model store, on the worker's registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from worker.models.tiers import Tier

_SECONDS = (0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class StoreMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()

        def seconds(name: str, doc: str) -> Histogram:
            return Histogram(name, doc, ["model"], buckets=_SECONDS, registry=r)

        self.load = seconds("inferlane_model_load_seconds", "Cold load from disk, with warm-up")
        self.promotion = seconds(
            "inferlane_model_promotion_seconds", "Host to device, with warm-up"
        )
        self.eviction = seconds(
            "inferlane_model_eviction_seconds", "Demotion or release, memory given back"
        )
        self.hits = Counter(
            "inferlane_model_tier_hits",
            "Model uses found on the device or the host tier",
            ["tier"],
            registry=r,
        )
        self.misses = Counter(
            "inferlane_model_tier_misses", "Model uses that loaded from disk", registry=r
        )
        self.evictions = Counter(
            "inferlane_model_evictions", "Models moved down, by source tier", ["tier"], registry=r
        )
        self.tier_bytes = Gauge(
            "inferlane_model_tier_bytes", "Measured bytes held per tier", ["tier"], registry=r
        )
        self.budget_bytes = Gauge(
            "inferlane_model_tier_budget_bytes", "Byte budget per tier", ["tier"], registry=r
        )
        self.load_failures = Counter(
            "inferlane_model_load_failures", "Failed loads, by model", ["model"], registry=r
        )
        self.unavailable = Gauge(
            "inferlane_model_unavailable",
            "1 while a model fails to load and is retried in the background",
            ["model"],
            registry=r,
        )
        self.optimization_refused = Counter(
            "inferlane_model_optimization_refused",
            "Optimized models refused (outputs differ from eager, or it failed); eager serves",
            ["model", "reason"],
            registry=r,
        )
        self.reloads = Counter(
            "inferlane_model_registry_reloads",
            "Registry file reloads, by result",
            ["result"],
            registry=r,
        )

    def occupancy(self, used: dict[Tier, int], budgets: dict[Tier, int]) -> None:
        for tier, n in used.items():
            self.tier_bytes.labels(tier.value).set(n)
        for tier, n in budgets.items():
            self.budget_bytes.labels(tier.value).set(n)
