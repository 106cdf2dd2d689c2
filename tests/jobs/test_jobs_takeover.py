"""Two ``inferlane run`` workers share a distributed job; one is killed with ``kill -9``
in the middle of a chunk: the other takes that chunk over from its checkpoint, and every
row ends once in SQL and once in the exported output, in input order."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from sqlalchemy import select, text

from storage import make_engine
from storage.job_chunks import DONE
from storage.schema import job_chunks, jobs
from worker.intake.broker import EmbeddedBroker

from .files import write_parquet

N = 120_000


@pytest.fixture
def env(demo_registry_path: Path) -> dict[str, str]:
    # A short session: the group notices the dead worker in seconds.
    return {
        **os.environ,
        "INFERLANE_MODEL_CACHE": str(demo_registry_path.parent),
        "INFERLANE_KAFKA__SESSION_TIMEOUT_MS": "6000",
    }


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worker", *args],
        env={**env, "COLUMNS": "250"},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def _worker(bootstrap: str, url: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, "-m", "worker", "run", "--bootstrap", bootstrap, "--database", url,
        "--group-id", "takeover", "--partitions", "4", "--torch-threads", "1",
        "--http-port", "0",
    ]  # fmt: skip
    with log.open("wb") as out:
        return subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)


def _until(condition: object, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"{what}: not reached in {timeout_s:g} s"
        time.sleep(0.02)


def test_a_killed_workers_chunk_is_taken_over_and_every_row_lands_once(
    broker: EmbeddedBroker,
    tmp_path: Path,
    pg_url: str,
    env: dict[str, str],
    workers: list[subprocess.Popen[bytes]],
) -> None:
    source = write_parquet(tmp_path / "in.parquet", N, row_group=10_000)
    output = tmp_path / "out.parquet"
    engine = make_engine(pg_url)
    for name in ("a", "b"):
        workers.append(_worker(broker.bootstrap, pg_url, env, tmp_path / f"{name}.log"))
    victim = workers[0]
    scored = _cli(
        "score", "--distributed", "--model", "digits", "--input", str(source),
        "--output", str(output), "--id-column", "id", "--label-column", "label",
        "--window-rows", "2500", "--chunk-rows", "10000", "--job", "kj",
        "--bootstrap", broker.bootstrap, "--database", pg_url, env=env,
    )  # fmt: skip
    assert scored.returncode == 0, scored.stderr

    def victim_mid_chunk() -> bool:
        c = job_chunks.c
        query = select(c.chunk).where(
            c.job == "kj",
            c.state == "running",
            c.runner.endswith(f":{victim.pid}"),
            c.checkpoint > c.start,
            c.checkpoint < c.start + c.rows,
        )
        with engine.connect() as conn:
            return conn.execute(query).first() is not None

    _until(victim_mid_chunk, "the first worker in the middle of a chunk")
    victim.send_signal(signal.SIGKILL)
    victim.wait()

    def done() -> bool:
        with engine.connect() as conn:
            return conn.execute(select(jobs.c.state).where(jobs.c.name == "kj")).scalar() == DONE

    _until(done, "the job done by the other worker")
    with engine.connect() as conn:
        total, distinct = conn.execute(
            text("SELECT COUNT(*), COUNT(DISTINCT request_id) FROM inference_results")
        ).one()
        drift = conn.execute(text("SELECT COUNT(*) FROM inference_log")).scalar_one()
        taken = conn.execute(
            text("SELECT COUNT(*) FROM job_chunks WHERE attempt > 1 AND runner LIKE :me"),
            {"me": f"%:{workers[1].pid}"},
        ).scalar_one()
    engine.dispose()
    assert (total, distinct, drift) == (N, N, N)
    assert taken >= 1  # the killed worker's chunk, finished by the other

    shown = _cli("jobs", "show", "kj", "--database", pg_url, env=env)
    assert "chunks taken over" in shown.stdout
    exported = _cli("jobs", "export", "kj", "--database", pg_url, env=env)
    assert exported.returncode == 0, exported.stderr
    table = pq.read_table(output, columns=["row", "id"])
    assert table.column("row").to_pylist() == list(range(N))
    assert table.column("id").to_pylist() == [f"id-{i}" for i in range(N)]
