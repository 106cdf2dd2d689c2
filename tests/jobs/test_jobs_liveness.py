"""A job's row tells the truth about its process: ``failed`` with the reason when it
raised, ``interrupted`` (resumable) when its process died or stopped, ``running`` only
while a process beats; by the database's clock, so a job of another machine reads the
same."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select, update

import storage.jobs
import worker.jobs.liveness
from storage import ResultStore
from storage.jobs import FAILED, INTERRUPTED, RUNNING, STALE_AFTER_S, JobStore
from storage.schema import jobs as jobs_table
from worker.jobs.liveness import JobFailed, running
from worker.jobs.local import LocalJob
from worker.jobs.params import JobParams
from worker.models import ModelRegistry

from .files import write_parquet
from .test_jobs_resume import WINDOW, kill_9_after, score_command


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worker", *args],
        env={**env, "COLUMNS": "250"},  # rich wraps at the terminal's width
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture
def env(demo_registry_path: Path) -> dict[str, str]:
    return {**os.environ, "INFERLANE_MODEL_CACHE": str(demo_registry_path.parent)}


GARBLED = """[[models]]
name = "garbled"
version = "1"
format = "export"
path = "garbled.pt2"
adapter = { kind = "classifier", features = 64, num_classes = 10 }
"""


def test_a_job_that_raises_ends_failed_with_its_reason(
    tmp_path: Path, db_url: str, env: dict[str, str]
) -> None:
    """The model's file is there but is no model: the job fails once it loads it."""
    (tmp_path / "garbled.pt2").write_bytes(b"not a torch.export program")
    registry = tmp_path / "registry.toml"
    registry.write_text(GARBLED)
    source = write_parquet(tmp_path / "in.parquet", 10)
    scored = _cli("score", "--model", "garbled", "--models", str(registry),
                  "--input", str(source), "--output", str(tmp_path / "out.parquet"),
                  "--database", db_url, "--job", "garbled", env=env)  # fmt: skip
    assert scored.returncode == 1, scored.stderr
    assert "job 'garbled' failed: model_unavailable" in scored.stderr

    listed = _cli("jobs", "list", "--database", db_url, env=env)
    assert listed.returncode == 0, listed.stderr
    (line,) = [line for line in listed.stdout.splitlines() if "│ garbled " in line]
    assert f" {FAILED} " in line and "model_unavailable: " in line
    shown = _cli("jobs", "show", "garbled", "--database", db_url, env=env)
    assert "│ state " in shown.stdout and f" {FAILED} " in shown.stdout
    assert "│ note " in shown.stdout and "model_unavailable: " in shown.stdout


def test_a_model_missing_when_the_job_runs_fails_it(
    tmp_path: Path, store: ResultStore, demo_registry: ModelRegistry
) -> None:
    """The command line refuses an unknown model up front; one that is gone by the time
    the job runs (another registry, a reload) fails the job with the reason."""
    params = JobParams(
        model="nope", input=write_parquet(tmp_path / "in.parquet", 10),
        output=tmp_path / "out.parquet",
    )  # fmt: skip
    with pytest.raises(JobFailed, match="unknown_model: unknown model 'nope'"):
        LocalJob("gone", params, demo_registry, store).run()
    record = JobStore(store.engine).get("gone")
    assert record is not None and record.status == FAILED
    assert record.error is not None and record.error.startswith("unknown_model: ")
    store.close()


def test_a_job_whose_process_was_killed_reads_interrupted_and_resumes(
    tmp_path: Path, db_url: str, env: dict[str, str]
) -> None:
    source = write_parquet(tmp_path / "in.parquet", 60_000, row_group=4096)
    command = score_command(source, tmp_path / "out.parquet", db_url)
    kill_9_after(command, env, db_url, 2 * WINDOW)

    def listed_line() -> str:
        listed = _cli("jobs", "list", "--database", db_url, env=env)
        (line,) = [line for line in listed.stdout.splitlines() if "│ resume " in line]
        return line

    # Dead, but its last beat is recent: it still reads running, as the database has it.
    assert f" {RUNNING} " in listed_line()
    # Its beats stop: once the last is STALE_AFTER_S old by the database's clock (aged
    # here rather than waited out), it reads interrupted.
    store = ResultStore(db_url)
    with store.engine.begin() as conn:
        db_now = conn.execute(select(func.now())).scalar_one()
        aged = db_now - timedelta(seconds=STALE_AFTER_S + 1)
        named = jobs_table.c.name == "resume"
        conn.execute(update(jobs_table).where(named).values(heartbeat_at=aged))
    store.close()
    line = listed_line()
    assert f" {INTERRUPTED} " in line and "run the same command again to resume it" in line
    rerun = subprocess.run(command, env=env, capture_output=True, check=False)
    assert rerun.returncode == 0, rerun.stderr.decode()[-2000:]
    shown = _cli("jobs", "show", "resume", "--database", db_url, env=env)
    assert "│ state " in shown.stdout and " done " in shown.stdout


@pytest.fixture
def store(db_url: str) -> ResultStore:
    return ResultStore(db_url)


def _job(jobs: JobStore, name: str) -> None:
    jobs.create(name, kind="local", model="digits", params={}, rows_total=10)


def test_heartbeats_keep_it_running_and_ctrl_c_or_an_error_say_so(
    store: ResultStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker.jobs.liveness, "HEARTBEAT_S", 0.05)
    monkeypatch.setattr(storage.jobs, "STALE_AFTER_S", 5.0)
    jobs = JobStore(store.engine)
    _job(jobs, "beating")
    with running(jobs, "beating"):
        claimed = jobs.get("beating")
        assert claimed is not None and claimed.status == RUNNING and claimed.runner
        deadline = time.monotonic() + 30
        while (now := jobs.get("beating")) and now.heartbeat_at == claimed.heartbeat_at:
            assert time.monotonic() < deadline, "no heartbeat"
            time.sleep(0.05)
        assert now is not None and now.status == RUNNING

    _job(jobs, "stopped")
    with pytest.raises(KeyboardInterrupt), running(jobs, "stopped"):
        raise KeyboardInterrupt
    stopped = jobs.get("stopped")
    assert stopped is not None and stopped.status == INTERRUPTED and stopped.state == RUNNING

    _job(jobs, "broken")
    with pytest.raises(JobFailed, match="boom"), running(jobs, "broken"):
        raise RuntimeError("boom")
    broken = jobs.get("broken")
    assert broken is not None and broken.status == FAILED and broken.error == "RuntimeError: boom"
    with running(jobs, "broken"):  # a rerun claims it again
        again = jobs.get("broken")
        assert again is not None and again.status == RUNNING and again.error is None
    store.close()


def test_staleness_is_judged_by_the_database_clock(store: ResultStore) -> None:
    """A row written by another machine: only the database's clock counts."""
    jobs = JobStore(store.engine)
    _job(jobs, "elsewhere")
    with store.engine.connect() as conn:
        db_now = conn.execute(select(func.now())).scalar_one()
        for age_s, expect in ((STALE_AFTER_S + 5, INTERRUPTED), (1.0, RUNNING)):
            beat = db_now - timedelta(seconds=age_s)
            conn.execute(
                update(jobs_table)
                .where(jobs_table.c.name == "elsewhere")
                .values(runner="other-host:4242", heartbeat_at=beat)
            )
            conn.commit()
            record = jobs.get("elsewhere")
            assert record is not None and record.status == expect, (age_s, record)
    store.close()
