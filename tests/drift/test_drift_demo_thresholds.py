"""The demo's anomaly thresholds fit each model: a misclassification for digits, and for
diabetes, whose outputs are in the hundreds, three times the spread of its clean errors
(a 0.5 threshold there counts almost every answer)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from storage import DriftRow, ResultStore, anomaly_count, drift_summary
from worker.demo.run import ANOMALY_RMS, anomaly_thresholds
from worker.models import ModelRegistry

SHIFT = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def _rows(model: str, outputs: np.ndarray, truth: np.ndarray, at: datetime) -> list[DriftRow]:
    errors = (outputs != truth).astype(float) if model == "digits" else outputs - truth
    return [
        DriftRow(f"{model}-{at:%H%M}-{i}", model, "1", float(o), float(e), float(err), at)
        for i, (o, e, err) in enumerate(zip(outputs, truth, errors, strict=True))
    ]


def test_thresholds_come_from_each_models_clean_errors(
    tmp_path: Path, demo_registry: ModelRegistry
) -> None:
    rng = np.random.default_rng(7)
    truth = rng.uniform(25, 346, 1000)  # diabetes targets
    clean = truth + rng.normal(0, 55, 1000)
    shifted = truth + rng.normal(0, 55, 1000) + 400  # a drifted model, far off
    labels = rng.integers(0, 10, 1000)
    predicted = np.where(rng.random(1000) < 0.03, (labels + 1) % 10, labels)
    before, after = SHIFT - timedelta(seconds=5), SHIFT + timedelta(seconds=5)
    rows = (
        _rows("diabetes", clean, truth, before)
        + _rows("diabetes", shifted, truth, after)
        + _rows("digits", predicted, labels, before)
    )
    with ResultStore(f"sqlite:///{tmp_path / 'demo.db'}") as store:
        store.write([], rows, [])
        thresholds = anomaly_thresholds(store.engine, demo_registry, SHIFT)
        summary = {m: drift_summary(store.engine, t)[m] for m, t in thresholds.items()}
        naive = anomaly_count(store.engine, 0.5, model="diabetes")

    rms = float(np.sqrt(np.mean((clean - truth) ** 2)))
    assert thresholds == {"digits": 0.5, "diabetes": pytest.approx(ANOMALY_RMS * rms)}
    assert summary["digits"].anomalies == int((predicted != labels).sum())
    assert summary["digits"].mean_abs_error == pytest.approx(float((predicted != labels).mean()))
    # Clean answers are almost never anomalies; the shifted ones nearly all are.
    clean_off = int((np.abs(clean - truth) > thresholds["diabetes"]).sum())
    assert clean_off <= 10
    assert summary["diabetes"].anomalies >= clean_off + 990
    assert naive >= 1990  # what the single 0.5 threshold said: nearly every answer
