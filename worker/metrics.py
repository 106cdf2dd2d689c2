"""Prometheus metrics, one registry per worker (tests run several in one process)."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from worker.pending import Batch, Outcome

_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class WorkerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.records = Counter("inferlane_records", "Records consumed", ["topic"], registry=r)
        self.results = Counter(
            "inferlane_results", "Results by model and status", ["model", "status"], registry=r
        )
        self.dead_letters = Counter(
            "inferlane_dead_letters", "Dead letters by error code", ["code"], registry=r
        )
        self.batch_size = Histogram(
            "inferlane_batch_size",
            "Requests per batch",
            ["model"],
            buckets=_BATCH_BUCKETS,
            registry=r,
        )
        self.latency = Histogram(
            "inferlane_latency_seconds",
            "Receipt to result, per lane",
            ["lane"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.queued = Gauge("inferlane_queued", "Requests waiting in lanes", registry=r)
        self.in_flight = Gauge("inferlane_in_flight", "Uncommitted records", registry=r)

    def consumed(self, topic_counts: Tally[str]) -> None:
        for topic, n in topic_counts.items():
            self.records.labels(topic).inc(n)

    def batch(self, batch: Batch) -> None:
        self.batch_size.labels(batch.model).observe(len(batch))

    def delivered(self, outcomes: Sequence[Outcome]) -> None:
        # Tally per chunk first: label lookups are the costly part, not the increments.
        statuses: Tally[tuple[str, str]] = Tally()
        codes: Tally[str] = Tally()
        latencies: dict[str, list[float]] = {}
        for o in outcomes:
            if o.result is not None:
                statuses[(o.result.model, o.result.status.value)] += 1
                lane = latencies.setdefault(o.result.priority.value, [])
                lane.append(o.result.latency_ms.total / 1000)
            if o.dead_letter is not None:
                codes[o.dead_letter.code] += 1
        for lane_name, seconds in latencies.items():
            histogram = self.latency.labels(lane_name)
            for s in seconds:
                histogram.observe(s)
        for (model, status), n in statuses.items():
            self.results.labels(model, status).inc(n)
        for code, n in codes.items():
            self.dead_letters.labels(code).inc(n)
