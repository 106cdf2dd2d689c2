"""``kill -9`` a running ``inferlane score`` and run the same command again: every row
lands exactly once in SQL and in the output, and the recomputed rows are counted."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from bench.jobs_scaleout import stored_rows
from storage import make_engine
from storage.jobs import JobStore
from worker.jobs.outputs import parts_dir

from .files import write_parquet

N = 60_000
WINDOW = 1000


def score_command(source: Path, output: Path, url: str) -> list[str]:
    return [
        sys.executable, "-m", "worker", "score", "--model", "digits",
        "--input", str(source), "--output", str(output), "--database", url,
        "--job", "resume", "--id-column", "id", "--label-column", "label",
        "--window-rows", str(WINDOW), "--torch-threads", "1",
    ]  # fmt: skip


def wait_for_checkpoint(url: str, rows: int, proc: subprocess.Popen[bytes]) -> int:
    engine = make_engine(url)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                job = JobStore(engine).get("resume")
            except SQLAlchemyError:  # the job table is not created yet
                job = None
            if job is not None and job.checkpoint >= rows:
                return job.checkpoint
            time.sleep(0.01)
        raise AssertionError("the job never reached the checkpoint while running")
    finally:
        engine.dispose()


def kill_9_after(command: list[str], env: dict[str, str], url: str, rows: int) -> None:
    """Run ``command`` until its job's checkpoint reaches ``rows``, then ``kill -9`` it."""
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_checkpoint(url, rows, proc)
    finally:
        proc.kill()
        proc.wait()


def test_kill_9_mid_job_then_the_same_command_resumes_exactly_once(
    tmp_path: Path, db_url: str, demo_registry_path: Path
) -> None:
    source = write_parquet(tmp_path / "in.parquet", N, row_group=4096)
    output = tmp_path / "out.parquet"
    env = {**os.environ, "INFERLANE_MODEL_CACHE": str(demo_registry_path.parent)}
    command = score_command(source, output, db_url)
    kill_9_after(command, env, db_url, 2 * WINDOW)

    engine = make_engine(db_url)
    jobs = JobStore(engine)
    killed = jobs.get("resume")
    assert killed is not None and killed.state == "running" and killed.checkpoint < N
    with engine.connect() as conn:
        stored = conn.execute(text("SELECT COUNT(*) FROM inference_results")).scalar_one()
    assert stored == killed.checkpoint  # nothing past the checkpoint reached SQL
    assert not output.exists() and parts_dir(output).exists()

    rerun = subprocess.run(command, env=env, capture_output=True, check=False)
    assert rerun.returncode == 0, rerun.stderr.decode()[-2000:]

    done = jobs.get("resume")
    assert done is not None and done.state == "done" and done.checkpoint == N
    assert done.recomputed <= WINDOW  # at most the window in flight at the kill
    engine.dispose()
    assert stored_rows(db_url) == (N, N, N)  # results, distinct ids, drift rows
    table = pq.read_table(output)
    assert table.column("row").to_pylist() == list(range(N))
    assert table.column("id").to_pylist() == [f"id-{i}" for i in range(N)]
    assert not parts_dir(output).exists()
