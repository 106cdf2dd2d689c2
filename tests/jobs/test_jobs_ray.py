"""The Ray Data entry point on a local Ray instance: a registry model scores a dataset in
``map_batches``, every row id once in SQL (a batch run again included), a bad row as a
``rejected`` result; with one call per actor, and with two at once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import ray
from sqlalchemy import text

from bench.jobs_scaleout import stored_rows
from storage import ResultStore
from worker.jobs.ray_data import Scorer
from worker.models import ModelRegistry

from .files import digits

N = 2000

# Ray Data sets options of its own that it has deprecated.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*")


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _rows(n: int) -> pa.Table:
    """``n`` digits rows with ids 0..n-1, then row ``n`` whose inputs are too short."""
    x, y = digits(n)
    inputs = [*x.tolist(), [1.0, 2.0]]
    return pa.table(
        {
            "id": pa.array(np.arange(n + 1)),
            "inputs": pa.array(inputs, type=pa.list_(pa.float32())),
            "label": pa.array([*y.tolist(), 3]),
        }
    )


def _scored(
    ds: ray.data.Dataset, kwargs: dict[str, object], actors: int, calls: int = 1
) -> pa.Table:
    scored = ds.map_batches(
        Scorer,
        fn_constructor_kwargs=kwargs,
        batch_format="pyarrow",
        batch_size=500,
        compute=ray.data.ActorPoolStrategy(
            size=actors,
            max_concurrent_calls_per_actor=calls,
            enable_true_multi_threading=calls > 1,
        ),
    )
    return pa.concat_tables(scored.iter_batches(batch_format="pyarrow"))


@pytest.mark.parametrize("calls", [1, 2], ids=["one-call-per-actor", "two-calls-per-actor"])
def test_map_batches_scores_every_row_once_into_sql(
    local_ray: None,
    db_url: str,
    demo_registry_path: Path,
    demo_registry: ModelRegistry,
    calls: int,
) -> None:
    rows = _rows(N)
    ds = ray.data.from_arrow([rows.slice(i, 500) for i in range(0, rows.num_rows, 500)])
    kwargs: dict[str, object] = {
        "model": "digits",
        "job": "rj",
        "id_column": "id",
        "label_column": "label",
        "database": db_url,
        "models": str(demo_registry_path),
        "torch_threads": 1,
    }
    out = _scored(ds, kwargs, actors=2, calls=calls)
    assert _scored(ds.limit(700), kwargs, actors=1).num_rows == 700  # scored again

    rows = out.column("row").to_pylist()
    assert sorted(rows) == list(range(N))
    labels = dict(zip(rows, out.column("predicted_label").to_pylist(), strict=True))
    model = demo_registry.get("digits")
    expected = [o["label"] for o in model.run(list(digits(N)[0]))]  # type: ignore[index]
    assert [labels[i] for i in range(N)] == expected
    with ResultStore(db_url) as store, store.engine.connect() as conn:
        query = text("SELECT status, COUNT(*) FROM inference_results GROUP BY status")
        statuses = {status: n for status, n in conn.execute(query)}
        rejected = conn.execute(
            text("SELECT request_id FROM inference_results WHERE status = 'rejected'")
        ).scalar_one()
    assert stored_rows(db_url) == (N + 1, N + 1, N)  # results, distinct ids, drift rows
    assert statuses == {"ok": N, "rejected": 1} and rejected == f"rj:{N}"
