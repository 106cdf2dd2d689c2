"""The scheduler's Prometheus metrics, on the worker's registry."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from worker.base.pending import Batch, Pending

_FORMATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5)


class SchedulingMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.cap = Gauge(
            "inferlane_batch_cap_requests",
            "Largest batch the controller allows now, per model",
            ["model"],
            registry=r,
        )
        self.decisions = Counter(
            "inferlane_batch_cap_decisions",
            "Controller decisions by reason (explore, back, best, settled, drift, latency, "
            "headroom, busy, ...), per model",
            ["model", "reason"],
            registry=r,
        )
        self.utilization = Gauge(
            "inferlane_utilization_ratio",
            "Device utilization (0-1) at the model's last controller decision: NVML on "
            "a GPU, the compute thread's busy fraction on CPU",
            ["model"],
            registry=r,
        )
        self.expired = Counter(
            "inferlane_expired",
            "Requests whose deadline passed before they ran",
            ["model", "lane"],
            registry=r,
        )
        self.late = Counter(
            "inferlane_late",
            "Requests computed after their deadline (delivered anyway)",
            ["model", "lane"],
            registry=r,
        )
        self.formation = Histogram(
            "inferlane_batch_formation_seconds",
            "Oldest item's receipt to its batch's formation",
            ["model", "lane"],
            buckets=_FORMATION_BUCKETS,
            registry=r,
        )

    def formed(self, batch: Batch) -> None:
        oldest = min(p.received_s for p in batch.items)
        lane = batch.items[0].lane.value
        self.formation.labels(batch.model, lane).observe(max(0.0, batch.formed_s - oldest))

    def count(self, counter: Counter, items: Iterable[Pending]) -> None:
        tally = Tally((p.model, p.lane.value) for p in items)
        for (model, lane), n in tally.items():
            counter.labels(model, lane).inc(n)
