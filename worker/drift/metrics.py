"""Drift metrics, on the worker's Prometheus registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class DriftMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.flags = Counter(
            "inferlane_drift_flags",
            "Drift windows that crossed a threshold, per model and metric (once per window)",
            ["model", "metric"],
            registry=registry,
        )
        self.value = Gauge(
            "inferlane_drift_value",
            "The metric's value in the last drift window evaluated",
            ["model", "metric"],
            registry=registry,
        )
        self.labels = Counter(
            "inferlane_drift_labels",
            "Late labels by outcome: joined, waiting, dead_lettered, duplicate",
            ["outcome"],
            registry=registry,
        )
