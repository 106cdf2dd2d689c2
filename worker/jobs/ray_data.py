"""Ray Data entry point: a registry model as a callable class for ``Dataset.map_batches``.

```python
import ray
from worker.jobs.ray_data import Scorer

ds = ray.data.read_parquet("s3://bucket/rows/")
scored = ds.map_batches(
    Scorer,
    fn_constructor_kwargs={"model": "digits", "models": "/etc/inferlane/models.toml",
                           "job": "nightly", "id_column": "id", "label_column": "label",
                           "database": "postgresql://..."},
    batch_format="pyarrow", batch_size=4096, compute=ray.data.ActorPoolStrategy(size=4),
)
```

Each actor loads the registry (``models``, a registry TOML) and the model once, through
the model store, and scores each batch through the local job's path: the same decoding
and checks, forward passes under the batch controller, the same output columns, and the
same result and drift rows in SQL, written in one transaction per batch. An actor may
run two calls at once (``max_concurrent_calls_per_actor=2``,
``enable_true_multi_threading=True``): they score one at a time, one's rows are written
while the other scores, and each returns only once its rows have committed. A row's
request id is ``"{job}:{id}"``: ``id_column`` holds a unique integer per row, so a batch
that Ray runs again (a task retried, an actor restarted) writes the same rows over
themselves, and every row id has exactly one result row. Bad rows get their
``rejected`` (or ``error``) result row and are left out of the returned batch, which
holds the good rows as a local job's output file does (``row`` is the id).

``ray`` is an optional dependency (``pip install 'inferlane[ray]'``); this module does
not import it.
"""

from __future__ import annotations

import gc
import logging
import threading
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa

from storage import ResultStore
from worker.execution.aside import submit_rows
from worker.execution.executor import ThreadExecutor
from worker.jobs.batch_size import BatchSizer
from worker.jobs.decode import Columns, Decoded, decode
from worker.jobs.rows import window_result
from worker.jobs.sources import Window
from worker.models import ModelRegistry

log = logging.getLogger(__name__)


class Scorer:
    """``map_batches``' callable class: constructed once per actor, called per batch
    (``batch_format="pyarrow"``)."""

    def __init__(
        self,
        *,
        model: str,
        models: str,
        job: str,
        id_column: str,
        input_columns: tuple[str, ...] | list[str] = ("inputs",),
        label_column: str | None = None,
        database: str | None = None,
        sql_results: bool = True,
        batch_size: int | None = None,
        torch_threads: int | None = None,
    ) -> None:
        if torch_threads is not None:
            import torch

            torch.set_num_threads(torch_threads)
        self._job = job
        self._registry = ModelRegistry.from_toml(Path(models))
        self._model = model
        loaded = self._registry.get(model)  # loaded here, once per actor
        # The passes run on a compute thread of the actor's own, as in a local job (a
        # daemon: it ends with the actor's process).
        self._forward = partial(submit_rows, ThreadExecutor(self._registry.get).submit, model)
        self._sizer = BatchSizer(
            self._registry.spec(model).scheduling, loaded.max_batch, fixed=batch_size
        )
        names = tuple(c.strip() for name in input_columns for c in name.split(",") if c.strip())
        self._columns = Columns(names, id_column, label_column)
        self._sql_results = sql_results
        self._store = ResultStore(database or "sqlite:///inferlane.db") if sql_results else None
        # Calls may run at once (max_concurrent_calls_per_actor): they score one at a
        # time, and each writes its rows while the next one scores.
        self._scoring = threading.Lock()
        # What exists now (modules, registry, model) lives as long as the actor: frozen
        # out of the collector's full passes, which walked all of it each time a batch's
        # rows piled up (then more than half the cost of building the rows). No pass
        # first, as in the worker: on a Ray actor's heap it took 0.3 s of every start.
        gc.freeze()

    def __call__(self, batch: pa.Table) -> pa.Table:
        if not isinstance(batch, pa.Table):
            raise TypeError(f"Scorer takes batch_format='pyarrow', got {type(batch).__name__}")
        ids = _row_ids(batch, self._columns.id)
        window = Window(int(ids.min()) if len(ids) else 0, batch)
        decoded = _by_id(decode(window, self._registry.adapter(self._model), self._columns), ids)
        with self._scoring:  # the batch controller is the actor's, one batch at a time
            result = window_result(
                self._job,
                window,
                decoded,
                self._registry.get(self._model),
                self._sizer,
                self._forward,
                sql_results=self._sql_results,
                later=len(batch),  # more batches to come, as far as this actor knows
            )
        if self._store is not None:
            self._store.write_columns(result.results, result.drift)
        for error in result.errors:
            log.info("job %s: row %s: %s", self._job, error.get("row"), error["error"])
        return result.table


def _row_ids(batch: pa.Table, column: str | None) -> np.ndarray:
    if column is None or column not in batch.column_names:
        raise ValueError(f"id_column {column!r} is not a column of the batch")
    values = batch.column(column)
    if not pa.types.is_integer(values.type) or values.null_count:
        raise ValueError(f"id_column {column!r} must hold an integer for every row")
    return values.to_numpy().astype(np.int64)


def _by_id(decoded: Decoded, ids: np.ndarray) -> Decoded:
    """Rows named by their ids instead of their place in the batch."""
    base = int(ids.min()) if len(ids) else 0
    decoded.rows = ids[decoded.rows - base]
    for error in decoded.errors:
        if error.row is not None:
            error.row = int(ids[error.row - base])
    return decoded
