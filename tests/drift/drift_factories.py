"""Synthetic observations: an i.i.d. stream of a classifier, and the same stream shifted."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import numpy as np
from prometheus_client import CollectorRegistry
from sqlalchemy import Engine

from storage.drift_records import CATEGORICAL
from worker.drift.metrics import DriftMetrics
from worker.drift.observe import Observation
from worker.drift.tracker import DriftTracker
from worker.models import ClassifierAdapter
from worker.settings.drift_thresholds import DriftThresholds

START = datetime(2026, 1, 1, tzinfo=UTC)
WINDOW_S = 60
CLASSES = 10


def tracker(engine: Engine, registry: CollectorRegistry | None = None) -> DriftTracker:
    return DriftTracker(
        engine,
        window_s=WINDOW_S,
        reference_rows=500,
        bins=10,
        flush_s=1.0,
        adapter_for=lambda model: ClassifierAdapter(64, CLASSES),
        thresholds=lambda model: DriftThresholds(),
        metrics=DriftMetrics(registry or CollectorRegistry()),
    )


def batch(rng: np.random.Generator, n: int, *, shifted: bool) -> Observation:
    """``n`` digits-like rows; shifted: most predictions are one class, inputs brighter,
    and half the labels wrong."""
    if shifted:
        labels = np.where(rng.random(n) < 0.7, 1, rng.integers(0, CLASSES, n))
        inputs = rng.normal(11.0, 1.0, n)
        wrong = rng.random(n) < 0.5
    else:
        labels = rng.integers(0, CLASSES, n)
        inputs = rng.normal(5.0, 1.0, n)
        wrong = rng.random(n) < 0.05
    return Observation(
        model="digits",
        model_version="1",
        rows=n,
        output_kind=CATEGORICAL,
        classes=CLASSES,
        outputs=labels.astype(np.int64),
        inputs=inputs,
        abs_errors=[float(w) for w in wrong],
    )


def stream(
    seed: int, windows: int, per_window: int, shift_at: int | None
) -> Iterator[tuple[datetime, Observation]]:
    """Batches of 50 rows, ``per_window`` rows per window; shifted from window
    ``shift_at`` on (None: never)."""
    rng = np.random.default_rng(seed)
    for w in range(windows):
        for i in range(per_window // 50):
            at = START + timedelta(seconds=w * WINDOW_S + i)
            yield at, batch(rng, 50, shifted=shift_at is not None and w >= shift_at)
