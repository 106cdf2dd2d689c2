"""Output parts: what a resumed job keeps, deletes and counts as recomputed."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from worker.jobs.outputs import Parts, errors_path


def table(start: int, n: int) -> pa.Table:
    return pa.table({"row": pa.array(range(start, start + n), type=pa.int64())})


def test_parts_past_the_checkpoint_are_discarded_and_counted(tmp_path: Path) -> None:
    parts = Parts(tmp_path / "out.parquet")
    for start in (0, 100):  # committed windows
        parts.begin(start, 100)
        parts.write(start, table(start, 100), [{"row": start, "error": "bad"}])
        parts.end(start, 100)
    parts.begin(200, 100)  # written, then killed before its commit
    parts.write(200, table(200, 99), [{"row": 250, "error": "bad"}])
    assert parts.discard_from(200) == 100

    parts.begin(200, 100)  # the rerun's window, killed while scoring
    assert parts.discard_from(200) == 100
    parts.write(200, table(200, 100), [])
    parts.assemble()

    assert pq.read_table(tmp_path / "out.parquet").column("row").to_pylist() == list(range(300))
    errors = errors_path(tmp_path / "out.parquet").read_text().splitlines()
    assert errors == ['{"row":0,"error":"bad"}', '{"row":100,"error":"bad"}']


def test_a_marker_left_below_the_checkpoint_is_not_work_lost(tmp_path: Path) -> None:
    parts = Parts(tmp_path / "out.jsonl")
    parts.begin(0, 10)
    parts.write(0, table(0, 10), [])  # committed; killed before the marker went
    assert parts.discard_from(10) == 0
    parts.assemble()
    assert len((tmp_path / "out.jsonl").read_bytes().splitlines()) == 10
