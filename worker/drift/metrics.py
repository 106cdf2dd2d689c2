"""Drift metrics, on the worker's Prometheus registry."""

from __future__ import annotations

from worker.base.metric_set import MetricSet, counter, gauge


class DriftMetrics(MetricSet):
    flags = counter(
        "inferlane_drift_flags",
        "Drift windows that crossed a threshold, per model and metric (once per window)",
        "model",
        "metric",
    )
    value = gauge(
        "inferlane_drift_value",
        "The metric's value in the last drift window evaluated",
        "model",
        "metric",
    )
    labels = counter(
        "inferlane_drift_labels",
        "Late labels by outcome: joined, waiting, dead_lettered, duplicate",
        "outcome",
    )
