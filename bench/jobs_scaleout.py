"""A distributed job scored by one, then two ``inferlane run`` workers into PostgreSQL.

Each run has a fresh embedded broker and database; the clock runs from the first row
published to the last result in SQL. ``python -m bench.jobs --only scaleout``.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import text

from bench.procs import Service
from storage import ResultStore, make_engine
from storage.jobs import JobStore
from worker.intake.broker import EmbeddedBroker
from worker.jobs.distributed import publish
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


def _worker(bootstrap: str, url: str, log: Path, torch_threads: int) -> Service:
    # ``-m worker`` from the repository root: the code in this checkout, as installed or not.
    command = [
        sys.executable, "-m", "worker", "run", "--bootstrap", bootstrap, "--database", url,
        "--group-id", "bench-jobs", "--partitions", str(PARTITIONS),
        "--torch-threads", str(torch_threads),
    ]  # fmt: skip
    return Service(command, log)


def _score(
    name: str,
    params: JobParams,
    registry: ModelRegistry,
    store: ResultStore,
    bootstrap: str,
    settings: WorkerSettings,
    services: list[Service],
) -> tuple[int, float]:
    """Publish the job and wait for every row's result; (rows, seconds publishing)."""
    started = time.perf_counter()
    record = publish(name, params, registry, store, bootstrap, settings=settings)
    published_s = time.perf_counter() - started
    total = record.rows_total or 0
    jobs = JobStore(store.engine)
    while sum(jobs.result_counts(name).values()) < total:
        for service in services:
            service.check_alive()
        time.sleep(0.1)
    return total, published_s


def one_run(
    registry: ModelRegistry,
    source: Path,
    warmup: Path,
    workers: int,
    work: Path,
    torch_threads: int,
) -> dict[str, Any]:
    params = JobParams(model="digits", input=source, id_column="id", label_column="label")
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
        try:
            # Warm-up: the workers have joined the group and loaded the model when it is done.
            warm = params.model_copy(update={"input": warmup})
            _score("warmup", warm, registry, store, broker.bootstrap, settings, services)
            started = time.perf_counter()
            total, published_s = _score(
                "scale", params, registry, store, broker.bootstrap, settings, services
            )
            elapsed = time.perf_counter() - started
        finally:
            for service in services:
                service.stop(grace_s=5.0)
        with store.engine.connect() as conn:
            stored, distinct = conn.execute(
                text(
                    "SELECT COUNT(*), COUNT(DISTINCT request_id) FROM inference_results"
                    " WHERE request_id LIKE 'scale:%'"
                )
            ).one()
    return {
        "workers": workers,
        "timing": "first row published -> last result in SQL, after a warm-up job",
        "rows": total,
        "seconds": round(elapsed, 2),
        "publish_seconds": round(published_s, 2),
        "rows_per_s": round(total / elapsed),
        "sql_rows": stored,
        "sql_distinct_ids": distinct,
        "each_row_once": stored == distinct == total,
    }
