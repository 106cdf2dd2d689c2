"""A distributed job in chunks beside the local job, on PostgreSQL.

Each run has a database of its own (and the distributed ones a fresh embedded broker);
both kinds write the same SQL rows, a result and a drift row per input row. The local
job runs in this process with the model loaded first. The distributed job is published
from this process and scored by one, then two ``inferlane run`` workers, timed from the
first chunk published to the job ``done`` in SQL, after a warm-up job (the workers
have joined the group and loaded the model). The machine's busy CPU share and the CPU
seconds of the workers and of PostgreSQL's processes during each run say what bounds
it. ``python -m bench.jobs --only scaleout``.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
from sqlalchemy import text

from bench.procs import Service
from storage import ResultStore, make_engine
from storage.jobs import DONE, JobStore
from worker.intake.broker import EmbeddedBroker
from worker.jobs.distributed import publish
from worker.jobs.local import LocalJob
from worker.jobs.params import JobParams
from worker.models import ModelRegistry
from worker.settings import TopicConfig, WorkerSettings

PG_ADMIN_URL = os.environ.get(
    "INFERLANE_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
PARTITIONS = 4


@contextmanager
def pg_database() -> Iterator[str]:
    admin = make_engine(PG_ADMIN_URL).execution_options(isolation_level="AUTOCOMMIT")
    name = f"inferlane_bench_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield admin.url.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
        admin.dispose()


class CpuUse:
    """CPU seconds over a run: the whole machine (busy share of every core), PostgreSQL's
    processes, and the processes given."""

    def __init__(self, pids: list[int]) -> None:
        self._pids = pids
        self._machine = psutil.cpu_times()
        self._postgres = _postgres_cpu_s()
        self._procs = _cpu_s(pids)
        self._started = time.perf_counter()

    def report(self) -> dict[str, float]:
        elapsed = time.perf_counter() - self._started
        now = psutil.cpu_times()
        busy = _busy(now) - _busy(self._machine)
        total = sum(now) - sum(self._machine)
        return {
            "machine_busy_share": round(busy / total, 3) if total else 0.0,
            "cores": psutil.cpu_count() or 1,
            "postgres_cpu_s": round(_postgres_cpu_s() - self._postgres, 1),
            "workers_cpu_s": round(_cpu_s(self._pids) - self._procs, 1),
            "wall_s": round(elapsed, 2),
        }


def _busy(times: Any) -> float:
    return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))


def _cpu_s(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        times = psutil.Process(pid).cpu_times()
        total += times.user + times.system
    return total


def _postgres_cpu_s() -> float:
    total = 0.0
    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] == "postgres":
            try:
                times = proc.cpu_times()
            except psutil.Error:  # a backend that ended meanwhile
                continue
            total += times.user + times.system
    return total


def _params(source: Path, **extra: Any) -> JobParams:
    return JobParams(model="digits", input=source, id_column="id", label_column="label", **extra)


def _sql_rows(url: str, job: str) -> dict[str, Any]:
    engine = make_engine(url)
    with engine.connect() as conn:
        results, distinct = conn.execute(
            text(
                "SELECT COUNT(*), COUNT(DISTINCT request_id) FROM inference_results"
                " WHERE request_id LIKE :job"
            ),
            {"job": f"{job}:%"},
        ).one()
        drift = conn.execute(
            text("SELECT COUNT(*) FROM inference_log WHERE request_id LIKE :job"),
            {"job": f"{job}:%"},
        ).scalar_one()
    engine.dispose()
    return {"sql_results": results, "sql_distinct_ids": distinct, "sql_drift_rows": drift}


def local_run(registry: ModelRegistry, source: Path, work: Path) -> dict[str, Any]:
    """The local job, into PostgreSQL: what one process does without Kafka."""
    params = _params(source, output=work / "local-out.parquet")
    with pg_database() as url, ResultStore(url) as store:
        cpu = CpuUse([os.getpid()])
        started = time.perf_counter()
        record = LocalJob("local", params, registry, store, overwrite=True).run()
        elapsed = time.perf_counter() - started
        used = cpu.report()
        rows = _sql_rows(url, "local")
    total = record.checkpoint
    return {
        "kind": "local",
        "rows": total,
        "seconds": round(elapsed, 2),
        "rows_per_s": round(total / elapsed),
        **rows,
        "each_row_once": rows["sql_results"] == rows["sql_distinct_ids"] == total,
        "cpu": used,
    }


def _worker(bootstrap: str, url: str, log: Path, torch_threads: int) -> Service:
    # ``-m worker`` from the repository root: the code in this checkout, as installed or not.
    command = [
        sys.executable, "-m", "worker", "run", "--bootstrap", bootstrap, "--database", url,
        "--group-id", "bench-jobs", "--partitions", str(PARTITIONS),
        "--torch-threads", str(torch_threads), "--http-port", "0",
    ]  # fmt: skip
    return Service(command, log)


def _until_done(jobs: JobStore, name: str, services: list[Service]) -> None:
    while (record := jobs.get(name)) is None or record.state != DONE:
        for service in services:
            service.check_alive()
        time.sleep(0.05)


def distributed_run(
    registry: ModelRegistry,
    source: Path,
    warmup: Path,
    workers: int,
    work: Path,
    torch_threads: int,
) -> dict[str, Any]:
    with EmbeddedBroker() as broker, pg_database() as url, ResultStore(url) as store:
        settings = WorkerSettings(
            bootstrap=broker.bootstrap,
            database_url=url,
            topics=TopicConfig(partitions=PARTITIONS),
        )
        services = [
            _worker(broker.bootstrap, url, work / f"worker-{workers}-{i}.log", torch_threads)
            for i in range(workers)
        ]
        for service in services:
            service.__enter__()
        jobs = JobStore(store.engine)

        def send(name: str, params: JobParams) -> None:
            publish(name, params, registry, store, broker.bootstrap, settings=settings)

        try:
            send("warmup", _params(warmup, output=work / f"warmup-{workers}.parquet"))
            _until_done(jobs, "warmup", services)
            cpu = CpuUse([s.pid for s in services])
            started = time.perf_counter()
            send("scale", _params(source, output=work / f"scale-{workers}.parquet"))
            published_s = time.perf_counter() - started
            _until_done(jobs, "scale", services)
            elapsed = time.perf_counter() - started
            used = cpu.report()
        finally:
            for service in services:
                service.stop(grace_s=5.0)
        record = jobs.get("scale")
        assert record is not None
        rows = _sql_rows(url, "scale")
    for name in ("warmup", "scale"):  # the parts: the next run has a database of its own
        shutil.rmtree(work / f"{name}-{workers}.parquet.parts", ignore_errors=True)
    total = record.rows_total or 0
    return {
        "kind": "distributed",
        "workers": workers,
        "timing": "first chunk published -> job done in SQL, after a warm-up job",
        "rows": total,
        "seconds": round(elapsed, 2),
        "publish_seconds": round(published_s, 2),
        "rows_per_s": round(total / elapsed),
        **rows,
        "each_row_once": rows["sql_results"] == rows["sql_distinct_ids"] == total,
        "cpu": used,
    }


def stored_rows(url: str) -> tuple[int, int, int]:
    """Result rows, distinct request ids among them, and drift rows in ``url``."""
    engine = make_engine(url)
    with engine.connect() as conn:
        total, distinct = conn.execute(
            text("SELECT COUNT(*), COUNT(DISTINCT request_id) FROM inference_results")
        ).one()
        drift = conn.execute(text("SELECT COUNT(*) FROM inference_log")).scalar_one()
    engine.dispose()
    return int(total), int(distinct), int(drift)
