"""One scenario's world: an embedded broker, a PostgreSQL database of its own behind a
proxy to cut, ``inferlane run`` workers as users start them, and a publisher."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from aiokafka import AIOKafkaProducer
from safetensors.torch import save_file
from sqlalchemy import make_url, text

from bench.chaos import hang_model
from bench.chaos.progress import Progress
from bench.chaos.proxy import TcpProxy
from bench.measure import RssSampler
from bench.procs import WORKER_ENV
from storage import make_engine
from worker.demo.models import ensure_demo_models
from worker.intake.broker import EmbeddedBroker, terminate
from worker.settings import TopicConfig

PG_URL = os.environ.get(
    "INFERLANE_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
TOPICS = TopicConfig()
REPO = Path(__file__).resolve().parents[2]
Record = tuple[bytes | None, bytes]


@dataclass
class WorkerProcess:
    """``python -m worker run`` (what the ``inferlane`` script runs) with its RSS sampled."""

    command: list[str]
    log: Path
    proc: subprocess.Popen[bytes] = field(init=False)
    rss: RssSampler = field(init=False)
    ended_on_purpose: bool = False

    def __post_init__(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.command,
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **WORKER_ENV},
            )
        self.rss = RssSampler(self.proc.pid, interval_s=0.25).start()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        self.ended_on_purpose = True
        self.proc.kill()
        self.proc.wait()
        self.rss.stop()

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM: the worker drains and leaves its group (SIGKILL after ``grace_s``)."""
        self.ended_on_purpose = True
        terminate(self.proc, grace_s=grace_s)
        self.rss.stop()


class Stack:
    def __init__(self, workdir: Path, *, hang_timeout_s: float = 5.0) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        self.broker = EmbeddedBroker().start()
        admin = make_engine(PG_URL).execution_options(isolation_level="AUTOCOMMIT")
        self._db = f"inferlane_chaos_{uuid.uuid4().hex[:10]}"
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{self._db}"'))
        admin.dispose()
        direct = make_url(PG_URL).set(database=self._db)
        self.engine = make_engine(direct.render_as_string(hide_password=False))
        self.proxy = TcpProxy((direct.host or "127.0.0.1", direct.port or 5432)).start()
        self.worker_url = direct.set(host="127.0.0.1", port=self.proxy.port).render_as_string(
            hide_password=False
        )
        self.registry = _write_registry(workdir, hang_timeout_s)
        self.workers: list[WorkerProcess] = []
        self.progress = Progress(self.engine).start()
        self._publishers: list[threading.Thread] = []
        self.offsets: list[tuple[int, int]] = []  # (partition, offset) of each record sent

    def start_worker(self) -> WorkerProcess:
        command = [
            sys.executable, "-m", "worker", "run",
            "--bootstrap", self.broker.bootstrap,
            "--database", self.worker_url,
            "--models", str(self.registry),
            "--torch-threads", "1",
            "--http-port", "0",  # workers side by side; nothing here reads their HTTP
        ]  # fmt: skip
        worker = WorkerProcess(command, self.workdir / f"worker-{len(self.workers)}.log")
        self.workers.append(worker)
        return worker

    def publish(self, records: Sequence[Record], *, rate_per_s: float) -> threading.Thread:
        """Send ``records`` to the normal lane at ``rate_per_s``, in the background."""
        thread = threading.Thread(
            target=lambda: asyncio.run(self._publish(records, rate_per_s)), daemon=True
        )
        thread.start()
        self._publishers.append(thread)
        return thread

    def published(self, timeout_s: float = 600.0) -> None:
        for thread in self._publishers:
            thread.join(timeout_s)

    async def _publish(self, records: Sequence[Record], rate_per_s: float) -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=self.broker.bootstrap, linger_ms=5, acks=1, request_timeout_ms=120_000
        )
        await producer.start()
        try:
            step = max(1, int(rate_per_s / 20))
            started = time.monotonic()
            for i in range(0, len(records), step):
                sends = [
                    await producer.send(TOPICS.normal, value, key=key)
                    for key, value in records[i : i + step]
                ]
                for meta in await asyncio.gather(*sends):
                    self.offsets.append((meta.partition, meta.offset))
                ahead_s = started + (i + step) / rate_per_s - time.monotonic()
                if ahead_s > 0:
                    await asyncio.sleep(ahead_s)  # pacing, not synchronization
        finally:
            await producer.stop()

    def unexpected_exits(self) -> int:
        return sum(not w.alive and not w.ended_on_purpose for w in self.workers)

    def peak_rss_mb(self) -> float:
        return max((w.rss.peak_mb for w in self.workers), default=0.0)

    def rss_mb(self, since_s: float, until_s: float) -> list[float]:
        return [
            rss / 2**20 for w in self.workers for t, rss in w.rss.samples if since_s <= t <= until_s
        ]

    def close(self) -> None:
        for worker in self.workers:
            if worker.alive:
                worker.kill()
        self.progress.stop()
        self.proxy.close()
        self.broker.stop()
        self.engine.dispose()
        admin = make_engine(PG_URL).execution_options(isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{self._db}" WITH (FORCE)'))
        admin.dispose()

    def __enter__(self) -> Stack:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _write_registry(workdir: Path, hang_timeout_s: float) -> Path:
    """digits and diabetes from the demo models, and a model that hangs on input 7."""
    demo = ensure_demo_models().parent
    weights = workdir / "hang.safetensors"
    save_file(hang_model.build().state_dict(), str(weights))
    path = workdir / "registry.toml"
    path.write_text(
        f"""
[[models]]
name = "digits"
version = "1"
format = "export"
path = "{demo / "digits-1.pt2"}"
adapter = {{ kind = "classifier", features = 64, num_classes = 10, shapes = [[8, 8]] }}

[[models]]
name = "diabetes"
version = "1"
format = "factory"
factory = "worker.demo.models:build_diabetes"
path = "{demo / "diabetes-1.safetensors"}"
adapter = {{ kind = "regressor", features = 10 }}

[[models]]
name = "hang"
version = "1"
format = "factory"
factory = "bench.chaos.hang_model:build"
path = "{weights}"
compute_timeout_s = {hang_timeout_s}
adapter = {{ kind = "regressor", features = 4 }}
"""
    )
    return path
