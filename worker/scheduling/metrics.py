"""The scheduler's Prometheus metrics, on the worker's registry."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable

from prometheus_client import Counter

from worker.base.metric_set import MetricSet, counter, gauge, histogram
from worker.base.pending import Batch, Pending

_FORMATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5)


class SchedulingMetrics(MetricSet):
    cap = gauge(
        "inferlane_batch_cap_requests",
        "Largest batch the controller allows now, per model",
        "model",
    )
    decisions = counter(
        "inferlane_batch_cap_decisions",
        "Controller decisions by reason (explore, back, best, settled, drift, latency, "
        "headroom, busy, ...), per model",
        "model",
        "reason",
    )
    utilization = gauge(
        "inferlane_utilization_ratio",
        "Device utilization (0-1) at the model's last controller decision: NVML on "
        "a GPU, the compute thread's busy fraction on CPU",
        "model",
    )
    expired = counter(
        "inferlane_expired", "Requests whose deadline passed before they ran", "model", "lane"
    )
    late = counter(
        "inferlane_late",
        "Requests computed after their deadline (delivered anyway)",
        "model",
        "lane",
    )
    formation = histogram(
        "inferlane_batch_formation_seconds",
        "Oldest item's receipt to its batch's formation",
        "model",
        "lane",
        buckets=_FORMATION_BUCKETS,
    )

    def formed(self, batch: Batch) -> None:
        oldest = min(p.received_s for p in batch.items)
        lane = batch.items[0].lane.value
        self.formation.labels(batch.model, lane).observe(max(0.0, batch.formed_s - oldest))

    def count(self, counter: Counter, items: Iterable[Pending]) -> None:
        tally = Tally((p.model, p.lane.value) for p in items)
        for (model, lane), n in tally.items():
            counter.labels(model, lane).inc(n)
