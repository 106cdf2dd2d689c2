"""Input files for job tests: digits rows in each format, with ids and labels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from worker.demo.models import digits_test_set


def digits(n: int) -> tuple[np.ndarray, np.ndarray]:
    x, y = digits_test_set()
    idx = np.arange(n) % len(x)
    return x[idx].astype(np.float32), y[idx].astype(np.int64)


def ids(n: int) -> list[str]:
    return [f"id-{i}" for i in range(n)]


def write_parquet(path: Path, n: int, *, row_group: int = 1000) -> Path:
    x, y = digits(n)
    table = pa.table(
        {
            "id": pa.array(ids(n)),
            "inputs": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 64),
            "label": pa.array(y),
        }
    )
    pq.write_table(table, path, row_group_size=row_group)
    return path


def write_csv(path: Path, n: int) -> Path:
    """One number per column: f0..f63."""
    x, y = digits(n)
    columns = {"id": pa.array(ids(n))}
    columns |= {f"f{j}": pa.array(x[:, j]) for j in range(64)}
    columns["label"] = pa.array(y)
    pacsv.write_csv(pa.table(columns), path)
    return path


def write_jsonl(path: Path, n: int) -> Path:
    x, y = digits(n)
    with path.open("wb") as f:
        for i in range(n):
            row = {"id": f"id-{i}", "inputs": x[i].tolist(), "label": int(y[i])}
            f.write(orjson.dumps(row) + b"\n")
    return path


CSV_COLUMNS = ",".join(f"f{j}" for j in range(64))
