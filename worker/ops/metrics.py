"""Prometheus metrics of the core pipeline, one registry per worker (tests run several).

Per-record work is tallied per chunk: latencies go into ``ChunkHistogram`` (one
vectorized bucket count per chunk and label set), counters get one increment per
label set. Gauges of live state (lane depth, lag, batch cap, memory) are sampled when
scraped, by ``worker.ops.sampler``; other subsystems add their own metrics to
``WorkerMetrics.registry``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter as Tally
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from prometheus_client import CollectorRegistry
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector

from consumers.contract import Priority, Status
from worker.base.metric_set import MetricSet, counter, gauge, histogram
from worker.base.pending import Batch, Outcome

_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
# Finer from 50 ms to 1 s, where lane targets sit; 250 ms (the high-lane alert's target)
# is a bound, so that alert compares against an exact bucket edge.
LATENCY_BUCKETS_S = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.35, 0.5, 0.75,
    1, 2.5, 5, 10, 30,
)  # fmt: skip
RECENT_ERRORS = 50  # kept for the status page
LOGGED_ERRORS_PER_CHUNK = 5  # a flood of bad input logs a few lines and a count
# The model label of every result whose model is not in the registry: a producer picks
# that name, and a flood of made-up names must not become a flood of series.
UNKNOWN_MODEL = "_unknown"

log = logging.getLogger(__name__)


class ChunkHistogram(Collector):
    """A labelled histogram fed a chunk of values at a time (numpy bucket counts).

    ``Histogram.observe`` costs about 0.6 us per value; a chunk of 1024 values costs
    about as much as one observe here. Exposed as a regular Prometheus histogram.
    """

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float]
    ) -> None:
        self.name = name
        self._doc = documentation
        self._labelnames = list(labelnames)
        self._bounds = np.asarray(buckets, dtype=np.float64)
        self._series: dict[tuple[str, ...], tuple[np.ndarray, list[float]]] = {}
        self._lock = threading.Lock()  # scrapes read from another thread

    def observe_many(self, labels: tuple[str, ...], values: Sequence[float] | np.ndarray) -> None:
        data = np.asarray(values, dtype=np.float64)
        if not data.size:
            return
        # Bucket i holds bounds[i-1] < v <= bounds[i]; the last one is +Inf.
        counts = np.bincount(
            np.searchsorted(self._bounds, data, side="left"), minlength=len(self._bounds) + 1
        )
        total = float(data.sum())
        with self._lock:
            series = self._series.get(labels)
            if series is None:
                series = self._series[labels] = (np.zeros(len(self._bounds) + 1, np.int64), [0.0])
            series[0][:] += counts
            series[1][0] += total

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self._doc, labels=self._labelnames)
        with self._lock:
            snapshot = [(k, c.cumsum(), s[0]) for k, (c, s) in self._series.items()]
        edges = [*(_le(b) for b in self._bounds), "+Inf"]
        for labels, cumulative, total in snapshot:
            buckets = [(le, float(n)) for le, n in zip(edges, cumulative, strict=True)]
            family.add_metric(list(labels), buckets, total)
        yield family

    def describe(self) -> Iterable[HistogramMetricFamily]:
        return [HistogramMetricFamily(self.name, self._doc, labels=self._labelnames)]


def _le(bound: float) -> str:
    return repr(float(bound))


@dataclass(frozen=True, slots=True)
class ErrorNote:
    """One failed request, for the status page: ids and codes, never payloads."""

    at_s: float  # epoch seconds
    request_id: str | None
    model: str | None
    code: str
    status: str


class WorkerMetrics(MetricSet):
    records = counter("inferlane_records_consumed", "Records consumed, per topic", "topic")
    results = counter(
        "inferlane_results", "Results by lane, model and status", "lane", "model", "status"
    )
    dead_letters = counter(
        "inferlane_dead_letters", "Dead letters by reason (error code)", "reason"
    )
    batch_size = histogram(
        "inferlane_batch_size_requests", "Requests per batch", "model", buckets=_BATCH_BUCKETS
    )
    batches = counter("inferlane_batches", "Batches dispatched", "model")
    compute_busy = counter(
        "inferlane_compute_busy_seconds",
        "Time spent in forward passes, per model; its rate is the compute utilization",
        "model",
    )
    queued = gauge("inferlane_queued_requests", "Requests waiting in lanes")
    in_flight = gauge("inferlane_in_flight_requests", "Consumed records not yet durable")

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        super().__init__(registry)
        self.latency = self._histogram(
            "inferlane_request_latency_seconds",
            "End to end: receipt by the worker to durable (Kafka and SQL)",
        )
        self.queue_latency = self._histogram(
            "inferlane_queue_latency_seconds", "Receipt to the start of its batch's compute"
        )
        self.compute_latency = self._histogram(
            "inferlane_compute_latency_seconds", "Forward pass of the batch that held the request"
        )
        self.publish_latency = self._histogram(
            "inferlane_publish_latency_seconds",
            "Result ready to durable: Kafka acknowledged and SQL committed",
        )
        self.recent_errors: deque[ErrorNote] = deque(maxlen=RECENT_ERRORS)
        self.errors_seen = 0
        self._known_model: Callable[[str], bool] = lambda _: True

    def label_models(self, known: Callable[[str], bool]) -> None:
        """Results are labelled with their model only where ``known(model)``; every
        other name shares the label ``UNKNOWN_MODEL``."""
        self._known_model = known

    def _histogram(self, name: str, doc: str) -> ChunkHistogram:
        h = ChunkHistogram(name, doc, ["lane", "model"], LATENCY_BUCKETS_S)
        self.registry.register(h)
        return h

    def consumed(self, topic_counts: Tally[str]) -> None:
        for topic, n in topic_counts.items():
            self.records.labels(topic).inc(n)

    def batch(self, batch: Batch) -> None:
        self.batch_size.labels(batch.model).observe(len(batch))
        self.batches.labels(batch.model).inc()

    def delivered(self, outcomes: Sequence[Outcome]) -> None:
        """A durable chunk: one tuple per record, then numpy and one update per label set."""
        now = time.monotonic()
        errors_before = self.errors_seen
        statuses: Tally[tuple[Priority, str, Status]] = Tally()
        codes: Tally[str] = Tally()
        # (received_s, queue_ms, compute_ms, total_ms, batch_size) per (lane, model)
        rows: dict[tuple[Priority, str], list[tuple[float, float, float, float, int]]] = {}
        model_labels: dict[str, str] = {}  # model name -> its label, once per chunk
        for o in outcomes:
            r = o.result
            if r is not None:
                model = model_labels.get(r.model)
                if model is None:
                    model = model_labels[r.model] = self._model_label(r.model)
                statuses[(r.priority, model, r.status)] += 1
                ms = r.latency_ms
                row = (o.record.received_s, ms.queue, ms.compute, ms.total, r.batch_size)
                key = (r.priority, model)
                if key in rows:
                    rows[key].append(row)
                else:
                    rows[key] = [row]
                if r.error is not None:
                    self._note(r.request_id, r.model, r.error.code, r.status.value)
            if o.dead_letter is not None:
                codes[o.dead_letter.code] += 1
                if r is None:
                    self._note(None, None, o.dead_letter.code, "dead_letter")
        busy: dict[str, float] = {}
        for (lane, model), chunk in rows.items():
            a = np.asarray(chunk, dtype=np.float64)
            labels = (lane.value, model)
            end_to_end = now - a[:, 0]
            compute = a[:, 2] / 1000
            self.latency.observe_many(labels, end_to_end)
            self.queue_latency.observe_many(labels, a[:, 1] / 1000)
            self.compute_latency.observe_many(labels, compute)
            self.publish_latency.observe_many(labels, np.maximum(end_to_end - a[:, 3] / 1000, 0))
            # Each item of a batch carries its share of the batch's forward pass.
            sizes = a[:, 4]
            shares = np.divide(compute, sizes, out=np.zeros_like(compute), where=sizes > 0)
            busy[model] = busy.get(model, 0.0) + float(shares.sum())
        if self.errors_seen > errors_before:
            self._log_errors(self.errors_seen - errors_before)
        for model, seconds in busy.items():
            self.compute_busy.labels(model).inc(seconds)
        for (lane, model, status), n in statuses.items():
            self.results.labels(lane.value, model, status.value).inc(n)
        for code, n in codes.items():
            self.dead_letters.labels(code).inc(n)

    def _model_label(self, model: str) -> str:
        return model if self._known_model(model) else UNKNOWN_MODEL

    def _note(self, request_id: str | None, model: str | None, code: str, status: str) -> None:
        self.recent_errors.append(ErrorNote(time.time(), request_id, model, code, status))
        self.errors_seen += 1

    def _log_errors(self, n: int) -> None:
        """Ids and codes of this chunk's failures; never inputs, outputs or messages."""
        shown = list(self.recent_errors)[-min(n, LOGGED_ERRORS_PER_CHUNK) :]
        for e in shown:
            log.warning(
                "request %s failed: %s", e.request_id, e.code,
                extra={"request_id": e.request_id, "error_code": e.code, "model": e.model,
                       "status": e.status},
            )  # fmt: skip
        if n > len(shown):
            log.warning("%d more failed requests in this chunk", n - len(shown),
                        extra={"suppressed": n - len(shown)})  # fmt: skip
