"""What a finished batch tells the drift windows: only the items that succeeded count,
per-batch steps count what item-by-item ones would, and batches observed on the event
loop reach SQL while the tracker runs. The last on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import numpy as np
import pytest

from bench.drift_cost import digits_batch
from consumers.contract import ErrorInfo
from storage import ResultStore
from storage.drift_records import CATEGORICAL, OUTPUT, WindowDelta
from storage.drift_windows import read_windows
from tests.drift.drift_factories import tracker
from worker.base.outcomes import completed
from worker.base.pending import Batch, BatchRun, ItemResult, Outcome
from worker.drift.observe import observe
from worker.models import ClassifierAdapter

FAILED = ErrorInfo(code="model_error", message="model raised on this input")


def _mixed(n: int) -> tuple[Batch, list[Outcome], ClassifierAdapter]:
    """Every fourth item failed; the others predict ``3 i mod 10`` for label ``i mod 10``."""
    batch, _, adapter = digits_batch(n)
    probs = [0.1] * 10
    results = [
        ItemResult(error=FAILED)
        if i % 4 == 3
        else ItemResult({"label": 3 * i % 10, "probs": probs})
        for i in range(n)
    ]
    return batch, completed(batch, BatchRun(results, "7", 0.0, 0.001), adapter), adapter


def test_only_the_items_that_succeeded_are_observed() -> None:
    batch, outcomes, adapter = _mixed(12)
    obs = observe(batch, outcomes, adapter)

    ok = [i for i in range(12) if i % 4 != 3]
    assert obs is not None
    assert (obs.model, obs.model_version, obs.rows) == ("digits", "7", len(ok))
    assert (obs.output_kind, obs.classes) == (CATEGORICAL, 10)
    assert obs.outputs.tolist() == [3 * i % 10 for i in ok]
    means = [float(np.mean(batch.items[i].item)) for i in ok]
    assert obs.inputs.tolist() == pytest.approx(means, rel=1e-6)
    # A classifier's error is 1 when misclassified, never the distance between classes.
    assert list(obs.abs_errors) == [float(3 * i % 10 != i % 10) for i in ok]


def test_a_batch_without_a_success_is_not_observed() -> None:
    batch, _, adapter = digits_batch(3)
    outcomes = completed(batch, BatchRun([ItemResult(error=FAILED)] * 3, "7", 0.0, 0.1), adapter)
    assert observe(batch, outcomes, adapter) is None


def test_labels_counted_per_batch_match_one_by_one() -> None:
    errors = [0.0, 0.25, 0.5, 0.5000001, 3.0, 1e-9, 7.5]
    one_by_one, per_batch = WindowDelta(), WindowDelta()
    for e in errors:
        one_by_one.add_label(e)
    per_batch.add_labels(np.asarray(errors[:3]))
    per_batch.add_labels(errors[3:])

    assert (per_batch.labelled, per_batch.wrong) == (one_by_one.labelled, one_by_one.wrong)
    assert (per_batch.labelled, per_batch.wrong) == (7, 3)
    assert per_batch.abs_error_sum == pytest.approx(one_by_one.abs_error_sum)


@pytest.fixture
def store(db_url: str) -> Iterator[ResultStore]:
    with ResultStore(db_url) as store:
        yield store


async def test_observed_batches_reach_sql_while_the_tracker_runs(store: ResultStore) -> None:
    batch, outcomes, _ = _mixed(40)  # 30 served rows per batch
    t = tracker(store.engine)  # flush_s 1.0, reference after 500 rows
    await t.start()
    try:
        for _ in range(20):
            t.observe(batch, outcomes)
            await asyncio.sleep(0.01)
        deadline = time.monotonic() + 30
        while sum(w.rows for w in await asyncio.to_thread(read_windows, store.engine)) < 600:
            assert time.monotonic() < deadline, "observed rows not flushed in time"
            await asyncio.sleep(0.05)
    finally:
        await t.stop()

    windows = read_windows(store.engine)
    wrong_per_batch = sum(3 * i % 10 != i % 10 for i in range(40) if i % 4 != 3)
    assert sum(w.rows for w in windows) == 600
    assert sum(w.labelled for w in windows) == 600
    assert sum(w.wrong for w in windows) == 20 * wrong_per_batch
    # The reference is built from the first 500 rows; then every row is binned.
    assert sum(sum(w.bins.get(OUTPUT, {}).values()) for w in windows) == 600
