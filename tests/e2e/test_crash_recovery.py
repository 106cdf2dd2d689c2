"""``inferlane run`` as users start it, against a broker started separately: SIGKILL it
mid-stream, restart it, and every request id ends with exactly one SQL row."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import psutil
import pytest
from sqlalchemy import text

from consumers.client import InferlaneClient
from consumers.contract import Status
from storage import anomaly_count, count_results, make_engine
from worker.demo.workload import digits_requests
from worker.intake.broker import EmbeddedBroker

from .support import read_topic, wait_for_rows

N = 12_000


def start_worker(
    bootstrap: str, db: Path, models: Path, *, write_process: bool = False
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "INFERLANE_MODEL_CACHE": str(models.parent),
        "INFERLANE_SINK__WRITE_PROCESS": str(write_process).lower(),
    }
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "worker",
            "run",
            "--bootstrap",
            bootstrap,
            "--database",
            f"sqlite:///{db}",
            "--max-batch",
            "64",
            "--http-port",
            "0",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@pytest.mark.parametrize("write_process", [False, True], ids=["writer-thread", "writer-process"])
def test_kill_9_then_restart_loses_and_duplicates_nothing(
    broker: EmbeddedBroker,
    tmp_path: Path,
    demo_registry_path: Path,
    workers: list[subprocess.Popen[bytes]],
    write_process: bool,
) -> None:
    db = tmp_path / "x.db"
    requests = digits_requests(N)
    with InferlaneClient(broker.bootstrap) as client:
        client.publish(requests)  # to inferlane.requests; the worker creates the rest

    start = functools.partial(
        start_worker, broker.bootstrap, db, demo_registry_path, write_process=write_process
    )
    workers.append(start())
    engine = make_engine(f"sqlite:///{db}")
    try:
        done = _wait_until_some(engine, workers[0], minimum=500)
        children = psutil.Process(workers[0].pid).children(recursive=True)
        spawned = any("spawn_main" in " ".join(c.cmdline()) for c in children)
        assert spawned == write_process  # the writer runs where the setting says
        workers[0].send_signal(signal.SIGKILL)
        workers[0].wait()
        assert done < N, "the worker finished before it could be killed mid-stream"
        # A writer process (or any other child) does not outlive the worker it served.
        _, alive = psutil.wait_procs(children, timeout=10)
        assert not alive

        workers.append(start())
        assert wait_for_rows(engine, N, timeout_s=120) == N
        with engine.connect() as conn:
            ids = {row[0] for row in conn.execute(text("SELECT request_id FROM inference_results"))}
        assert ids == {r.request_id for r in requests}  # none missing, none extra

        # Every result reached Kafka too (at least once: a replay adds duplicates), before
        # SQL; and the anomaly query on the drift log counts exactly the misclassified
        # digits among them.
        labels: dict[str, int] = {}
        for record in read_topic(broker.bootstrap, "inferlane.results", timeout_s=60):
            result = orjson.loads(record.value)
            labels[result["request_id"]] = result["outputs"]["label"]
        assert set(labels) == ids
        wrong = sum(1 for r in requests if labels[r.request_id] != r.expected)
        assert anomaly_count(engine, 0.5, model="digits") == wrong
        with engine.connect() as conn:
            statuses = {
                row[0] for row in conn.execute(text("SELECT status FROM inference_results"))
            }
        assert statuses == {Status.OK.value}
    finally:
        engine.dispose()


def _wait_until_some(engine: object, proc: subprocess.Popen[bytes], minimum: int) -> int:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert proc.poll() is None, "worker exited on its own"
        try:
            done = count_results(engine)  # type: ignore[arg-type]
        except Exception:  # the worker has not migrated the schema yet
            done = 0
        if done >= minimum:
            return done
        time.sleep(0.02)
    raise AssertionError(f"fewer than {minimum} results after 90 s")
