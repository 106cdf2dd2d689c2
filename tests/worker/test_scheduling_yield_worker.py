"""Lone high requests beside bulk work, in a real worker on the real broker: they never
wait for a low batch in progress, and bulk work yields to them while they are in."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from e2e.slow import STALL, STALL_S
from e2e.support import with_test_model

from consumers.client import InferlaneClient
from consumers.contract import Status
from worker.demo.workload import digits_requests
from worker.facade import Worker
from worker.intake.broker import EmbeddedBroker
from worker.models import ModelRegistry
from worker.settings import SchedulingConfig, WorkerSettings


async def until(condition: Callable[[], bool], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


async def test_a_lone_high_request_is_answered_while_a_long_low_batch_computes(
    broker: EmbeddedBroker, tmp_path: Path, demo_registry_path: Path
) -> None:
    registry = with_test_model(demo_registry_path, tmp_path, "e2e.slow:build")
    settings = WorkerSettings(bootstrap=broker.bootstrap, database_url=f"sqlite:///{tmp_path}/s.db")
    stall = {"request_id": "stall", "model": "slow", "inputs": [STALL, 0.0, 0.0, 0.0]}
    async with Worker(settings, registry) as worker:
        batches = worker.metrics.registry.get_sample_value
        with InferlaneClient(broker.bootstrap) as client:
            await asyncio.to_thread(client.watch_results)
            client.publish([stall], topic=settings.topics.low)
            await until(lambda: batches("inferlane_batches_total", {"model": "slow"}) == 1)
            started = time.monotonic()
            high = client.publish(digits_requests(1, prefix="urgent"), topic=settings.topics.high)
            answered = await asyncio.to_thread(client.results, high, timeout_s=STALL_S / 2)
            waited_s = time.monotonic() - started
            stalled = await asyncio.to_thread(client.results, ["stall"], timeout_s=2 * STALL_S)
    assert answered[high[0]].status == Status.OK
    assert waited_s < STALL_S / 2  # not after the low batch: it computes STALL_S
    assert stalled["stall"].status == Status.OK


async def run_backlog_with_lone_high_requests(
    broker: EmbeddedBroker, tmp_path: Path, registry: ModelRegistry, yield_share: float | None
) -> float | None:
    """A digits backlog on the low topic, and five high requests sent one at a time while
    it drains; every result arrives. Returns the seconds bulk work yielded."""
    settings = WorkerSettings(
        bootstrap=broker.bootstrap,
        database_url=f"sqlite:///{tmp_path}/y.db",
        scheduling=SchedulingConfig(yield_share=yield_share),
    )
    backlog = 3000
    async with Worker(settings, registry) as worker:
        metric = worker.metrics.registry.get_sample_value
        low = {"lane": "low", "model": "digits", "status": "ok"}
        with InferlaneClient(broker.bootstrap) as client:
            await asyncio.to_thread(client.watch_results)
            client.publish(digits_requests(backlog, prefix="bulk"), topic=settings.topics.low)
            await until(lambda: (metric("inferlane_batches_total", {"model": "digits"}) or 0) > 1)
            for i in range(5):
                urgent = digits_requests(1, prefix=f"urgent{i}")
                high = client.publish(urgent, topic=settings.topics.high)
                got = await asyncio.to_thread(client.results, high, timeout_s=60)
                assert got[high[0]].status == Status.OK
        await until(lambda: metric("inferlane_results_total", low) == backlog, timeout_s=120)
        return metric("inferlane_bulk_yield_seconds_total")


async def test_bulk_work_yields_while_a_high_request_is_in_the_worker(
    broker: EmbeddedBroker, tmp_path: Path, demo_registry: ModelRegistry
) -> None:
    held_s = await run_backlog_with_lone_high_requests(broker, tmp_path, demo_registry, 0.1)
    assert held_s is not None and held_s > 0


async def test_with_no_share_bulk_work_never_yields(
    broker: EmbeddedBroker, tmp_path: Path, demo_registry: ModelRegistry
) -> None:
    held_s = await run_backlog_with_lone_high_requests(broker, tmp_path, demo_registry, None)
    assert held_s == 0
