"""What every scenario shares: its context, its result shape, and result parsing."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import statistics
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench.kafka_io import ResultsReader, create_topics
from bench.plan import Plan
from bench.procs import Service, inferlane_command
from worker.intake.broker import EmbeddedBroker

# Latency bases, named in every result so that no two are compared by mistake.
SERVER = "server: record received by the consumer -> result ready (latency_ms.total)"
END_TO_END = "end to end: request sent -> result read from the results topic"


@dataclass
class Context:
    plan: Plan
    out: Path
    torch_threads: int
    say: Callable[[str], None] = print
    profile: bool = False  # py-spy on inferlane's throughput runs (bench.profile)
    worker_args: tuple[str, ...] = ()  # extra `inferlane run` flags, e.g. --max-batch 32

    def path(self, name: str) -> Path:
        return self.out / name


@dataclass
class Measured:
    """One system in one scenario."""

    scenario: str
    model: str
    system: str
    throughput_rps: float
    p50_ms: float
    p99_ms: float
    peak_rss_mb: float
    results: int
    window_s: float
    latency_basis: str
    extra: dict[str, Any] = field(default_factory=dict)


def median_run(runs: list[Measured], system: str, **extra: object) -> Measured:
    """Runs of one configuration as one result: the median throughput under ``system``,
    every run's rate in ``extra["runs_rps"]``, and ``extra`` added."""
    first = runs[0]
    return dataclasses.replace(
        first,
        system=system,
        throughput_rps=statistics.median(m.throughput_rps for m in runs),
        extra={**first.extra, "runs_rps": [round(m.throughput_rps, 1) for m in runs], **extra},
    )


def parse(values: list[bytes]) -> list[dict[str, Any]]:
    """Results as dicts, the first one per request id (Kafka delivery is at least once)."""
    seen: dict[str, dict[str, Any]] = {}
    for value in values:
        result = orjson.loads(value)
        seen.setdefault(result["request_id"], result)
    return list(seen.values())


def server_latencies(results: list[dict[str, Any]]) -> list[float]:
    return [float(r["latency_ms"]["total"]) for r in results if r.get("status") == "ok"]


async def read_while_alive(
    reader: ResultsReader,
    service: Service,
    n: int,
    *,
    timeout_s: float,
    run_s: float | None = None,
) -> None:
    """``reader.until`` in short steps, failing fast if the service dies."""
    deadline = time.monotonic() + timeout_s
    while reader.count < n and time.monotonic() < deadline:
        service.check_alive()
        step = min(1.0, deadline - time.monotonic())
        if await reader.until(n, timeout_s=step, run_s=run_s):
            return
        if (
            run_s is not None
            and reader.arrivals
            and time.monotonic() - reader.arrivals[0].mono_s >= run_s
        ):
            return
    if not reader.arrivals:
        raise TimeoutError(f"no results within {timeout_s:.0f}s (see {service.log})")


async def read_for(reader: ResultsReader, service: Service, seconds: float) -> None:
    """Read results for ``seconds`` (no count to wait for), failing fast if the service
    dies."""
    await read_while_alive(reader, service, 2**62, timeout_s=seconds)


def inferlane(
    ctx: Context,
    database: Path,
    extra: tuple[str, ...] | None = None,
    baseline: str | None = None,
) -> Callable[[str], list[str]]:
    """``inferlane run`` on a broker, with the run's torch threads and worker flags
    (or ``extra`` instead of the flags); a ``baseline`` runs ``bench.baseline_worker``."""
    flags = ctx.worker_args if extra is None else extra
    return lambda bootstrap: inferlane_command(
        bootstrap, database, torch_threads=ctx.torch_threads, extra=flags, baseline=baseline
    )


@contextlib.asynccontextmanager
async def on_fresh_broker(
    command: Callable[[str], list[str]], log: Path
) -> AsyncIterator[tuple[str, ResultsReader, Service]]:
    """A fresh embedded broker with the bench topics, a reader of its results topic,
    and the system under test, ``command(bootstrap)``, as a subprocess logging to
    ``log``: (bootstrap, reader, service). The reader's arrivals outlive the block."""
    with EmbeddedBroker() as broker:
        await create_topics(broker.bootstrap)
        reader = await ResultsReader(broker.bootstrap).start()
        try:
            with Service(command(broker.bootstrap), log) as service:
                yield broker.bootstrap, reader, service
        finally:
            await reader.stop()


@contextlib.contextmanager
def worker_env(**values: str | None) -> Iterator[None]:
    """Environment for the worker subprocesses started inside (they read ``INFERLANE_*``
    settings from it); a None value leaves that variable as it was."""
    given = {k: v for k, v in values.items() if v is not None}
    before = {k: os.environ.get(k) for k in given}
    os.environ.update(given)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
