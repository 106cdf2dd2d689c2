"""Reference-model sampling: a served output far from the reference model's is stored
and flags its window; one that agrees does not. SQLite and PostgreSQL."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from prometheus_client import CollectorRegistry

from bench.drift_cost import digits_batch
from storage import ResultStore
from storage.drift_windows import read_flags, read_windows
from storage.reference_checks import deviant_checks
from worker.base.outcomes import completed
from worker.base.pending import BatchRun, ItemResult
from worker.drift.metrics import DriftMetrics
from worker.drift.reference import deviation, sampled
from worker.drift.tracker import DriftTracker
from worker.models import ClassifierAdapter, ModelRegistry
from worker.settings.drift_thresholds import DriftThresholds

AT = datetime(2026, 1, 1, tzinfo=UTC)


def test_deviation_of_each_output_kind() -> None:
    assert deviation(1.5, 1.25) == 0.25
    assert deviation([0.0, 1.0], [0.0, 0.5]) == 0.5
    same = {"label": 1, "probs": [0.2, 0.8]}
    assert deviation(same, {"label": 1, "probs": [0.25, 0.75]}) == pytest.approx(0.05)
    assert deviation(same, {"label": 0, "probs": [0.6, 0.4]}) == 1.0
    assert deviation([1.0], [1.0, 2.0]) == math.inf
    assert deviation(float("nan"), 1.0) == math.inf


def test_sampling_takes_about_the_share_and_is_stable() -> None:
    ids = [f"r{i}" for i in range(20_000)]
    taken = [i for i in ids if sampled(i, 0.05)]
    assert 800 < len(taken) < 1200
    assert taken == [i for i in ids if sampled(i, 0.05)]


@pytest.fixture
def store(db_url: str) -> Iterator[ResultStore]:
    with ResultStore(db_url) as store:
        yield store


def _tracker(store: ResultStore, registry: ModelRegistry) -> DriftTracker:
    settings = DriftThresholds(reference_model="digits", reference_share=0.5)
    return DriftTracker(
        store.engine,
        window_s=60,
        reference_rows=500,
        bins=10,
        flush_s=1.0,
        adapter_for=lambda model: ClassifierAdapter(64, 10),
        thresholds=lambda model: settings,
        metrics=DriftMetrics(CollectorRegistry()),
        run_reference=lambda name, served: registry.get(name).run([p.item for p in served]),
    )


def test_a_model_that_disagrees_with_its_reference_is_flagged(
    store: ResultStore, demo_registry: ModelRegistry
) -> None:
    batch, run, adapter = digits_batch(64)  # served outputs: uniform probabilities
    t = _tracker(store, demo_registry)
    t.absorb([(batch, completed(batch, run, adapter), AT)])
    t.flush(final=True)

    deviant = deviant_checks(store.engine, model="digits")
    assert 16 < len(deviant) < 48  # about half the batch was sampled
    assert {row["reference_model"] for row in deviant} == {"digits"}
    [window] = read_windows(store.engine)
    assert window.ref_checked == window.ref_deviant == len(deviant)
    assert {m for _, m, *_ in read_flags(store.engine)} >= {"reference_deviant"}


def test_a_model_that_agrees_with_its_reference_is_not_flagged(
    store: ResultStore, demo_registry: ModelRegistry
) -> None:
    batch, _, adapter = digits_batch(64)
    served = demo_registry.get("digits").run([p.item for p in batch.items])
    run = BatchRun([ItemResult(outputs=o) for o in served], "1", 0.0, 0.001)
    t = _tracker(store, demo_registry)
    t.absorb([(batch, completed(batch, run, adapter), AT)])
    t.flush(final=True)

    [window] = read_windows(store.engine)
    assert window.ref_checked > 0
    assert window.ref_deviant == 0
    assert deviant_checks(store.engine) == []
    assert "reference_deviant" not in {m for _, m, *_ in read_flags(store.engine)}
