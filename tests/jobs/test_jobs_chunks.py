"""Chunks of a distributed job: planned from the input, claimed by one worker at a time,
taken over when their holder stops beating, and committed only by their holder."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import text, update

from storage import ResultStore
from storage.job_chunks import DONE, PENDING, STALLED, ChunkStore, Part, Span
from storage.jobs import RUNNING, STALE_AFTER_S, JobConflict, JobStore, WindowCounts
from storage.schema import job_chunks
from worker.base.pending import Batch, BatchRun
from worker.execution.executor import ThreadExecutor
from worker.jobs.chunk_parts import ChunkParts, parts_folder
from worker.jobs.chunk_run import ChunkRunner
from worker.jobs.chunks import plan
from worker.jobs.distributed import export_job
from worker.jobs.outputs import errors_path
from worker.jobs.params import JobParams
from worker.models import ModelRegistry

from .files import write_csv, write_parquet


def test_parquet_chunks_are_whole_row_groups_and_a_large_group_is_cut(tmp_path: Path) -> None:
    small = write_parquet(tmp_path / "small.parquet", 2300, row_group=300)
    assert plan(small, 1000, 250, 2300) == [
        Span(0, 900), Span(900, 900), Span(1800, 500)
    ]  # fmt: skip
    big = write_parquet(tmp_path / "big.parquet", 2300, row_group=2300)
    assert plan(big, 1000, 250, 2300) == [Span(0, 1000), Span(1000, 1000), Span(2000, 300)]
    csv = write_csv(tmp_path / "in.csv", 10)
    assert plan(csv, 4, 3, 10) == [Span(0, 3), Span(3, 3), Span(6, 3), Span(9, 1)]


def _job(
    store: ResultStore,
    tmp_path: Path,
    rows: int,
    spans: list[Span],
    *,
    batch_size: int | None = None,
) -> JobParams:
    source = write_parquet(tmp_path / "in.parquet", rows, row_group=500)
    params = JobParams(
        model="digits",
        input=source,
        output=tmp_path / "out.parquet",
        id_column="id",
        label_column="label",
        window_rows=250,
        batch_size=batch_size,
    )
    JobStore(store.engine).create(
        "j", kind="distributed", model="digits", params=params.stored(), rows_total=rows
    )
    ChunkStore(store.engine).add("j", spans)
    return params


def _age_heartbeat(store: ResultStore, chunk: int) -> None:
    """As if its holder's last beat was longer ago than a live holder's ever is."""
    old = datetime.now(UTC) - timedelta(seconds=STALE_AFTER_S + 5)
    with store.engine.begin() as conn:
        conn.execute(update(job_chunks).where(job_chunks.c.chunk == chunk).values(heartbeat_at=old))


def test_a_chunk_is_held_once_and_taken_over_when_its_holder_stops_beating(
    db_url: str, tmp_path: Path
) -> None:
    with ResultStore(db_url) as store:
        _job(store, tmp_path, 1000, [Span(0, 500), Span(500, 500)])
        chunks = ChunkStore(store.engine)
        first = chunks.claim("j", 0, "a:1")
        assert first is not None and first.attempt == 1
        assert chunks.claim("j", 0, "b:2") is None  # held by a live worker
        step = chunks.commit_window(
            first, 0, WindowCounts(250), Part(0, 250, None, None), last=False
        )
        store.write([], [], [], also=step)

        _age_heartbeat(store, 0)
        assert chunks.states("j").counts == {STALLED: 1, PENDING: 1}
        assert chunks.takeable() == [("j", 0), ("j", 1)]
        second = chunks.claim("j", 0, "b:2")
        assert second is not None and (second.attempt, second.checkpoint) == (2, 250)

        # The first holder comes back: nothing it writes counts any more.
        late = chunks.commit_window(
            first, 250, WindowCounts(250), Part(250, 250, None, None), last=True
        )
        with pytest.raises(JobConflict):
            store.write([], [], [], also=late)
        assert not chunks.heartbeat(first)
        chunks.release(first)
        assert chunks.states("j").counts == {RUNNING: 1, PENDING: 1}

        step = chunks.commit_window(
            second, 250, WindowCounts(250), Part(250, 250, None, None), last=True
        )
        store.write([], [], [], also=step)
        assert JobStore(store.engine).get("j").state == RUNNING  # type: ignore[union-attr]
        third = chunks.claim("j", 1, "b:2")
        assert third is not None
        step = chunks.commit_window(
            third, 500, WindowCounts(500), Part(500, 500, None, None), last=True
        )
        store.write([], [], [], also=step)
        job = JobStore(store.engine).get("j")
        assert job is not None and (job.state, job.checkpoint) == (DONE, 1000)
        assert chunks.states("j").counts == {DONE: 2} and chunks.states("j").taken_over == 1
        assert chunks.claim("j", 1, "c:3") is None  # done: never again


def test_a_chunk_taken_over_mid_way_is_scored_once_into_sql_and_the_output(
    db_url: str, tmp_path: Path, demo_registry: ModelRegistry
) -> None:
    """The first holder commits two windows and writes the part of the third without
    committing it (as when killed between the two): the second holder starts at the
    checkpoint, and the export reads only the committed parts."""
    with ResultStore(db_url) as store:
        params = _job(store, tmp_path, 1000, [Span(0, 1000)], batch_size=250)
        chunks = ChunkStore(store.engine)
        first = chunks.claim("j", 0, "a:1")
        assert first is not None
        stop = threading.Event()
        batches = iter(range(1, 100))
        executor = ThreadExecutor(demo_registry.get)

        def submit(batch: Batch) -> Future[BatchRun]:
            if next(batches) == 2:  # one batch per window: the holder stops after two
                stop.set()
            return executor.submit(batch)

        runner = ChunkRunner(demo_registry, store, submit)
        assert runner.run(first, stop) is False
        job = JobStore(store.engine).get("j")
        assert job is not None and job.checkpoint == 500
        parts = ChunkParts(parts_folder("j", params))
        bogus = pa.table({"row": pa.array([999] * 250)})
        parts.write(first, 500, bogus, [{"row": 999, "error": "never committed"}])

        _age_heartbeat(store, 0)
        second = chunks.claim("j", 0, "b:2")
        assert second is not None and second.checkpoint == 500
        assert ChunkRunner(demo_registry, store, executor.submit).run(second, threading.Event())
        executor.shutdown()
        assert export_job("j", store.engine) == 1000
        with store.engine.connect() as conn:
            total, distinct = conn.execute(
                text("SELECT COUNT(*), COUNT(DISTINCT request_id) FROM inference_results")
            ).one()
    assert (total, distinct) == (1000, 1000)
    assert pq.read_table(tmp_path / "out.parquet").column("row").to_pylist() == list(range(1000))
    assert errors_path(tmp_path / "out.parquet").read_bytes() == b""
