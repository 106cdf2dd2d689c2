"""A model that hangs on one input: that request (and its batch) fails with
model_timeout, the hung thread is reported, and every other request is served."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.chaos import hang_model as hang
from consumers.client import InferlaneClient
from consumers.contract import DeadLetterHeaders, Status
from worker.demo.workload import digits_requests
from worker.execution.compute_threads import ComputeUnhealthy
from worker.facade import Worker
from worker.intake.broker import EmbeddedBroker
from worker.launch import run_until
from worker.models import ModelRegistry
from worker.settings import ComputeConfig

from .support import read_topic, settings_for, with_test_model


@pytest.fixture
def hang_registry(tmp_path: Path, demo_registry_path: Path) -> Iterator[ModelRegistry]:
    registry = with_test_model(
        demo_registry_path,
        tmp_path,
        "bench.chaos.hang_model:build",
        name="hang",
        compute_timeout_s=3.0,
    )
    hang.RELEASE.clear()
    yield registry
    hang.RELEASE.set()  # the abandoned thread ends with the test


def hang_requests(prefix: str, n: int, *, hang_at: int | None = None) -> list[dict[str, object]]:
    return [
        {
            "request_id": f"{prefix}-{i}",
            "model": "hang",
            "inputs": [hang.HANG if i == hang_at else float(i % 5), 1.0, 2.0, 3.0],
        }
        for i in range(n)
    ]


async def test_a_hung_model_fails_its_batch_with_model_timeout_and_the_rest_is_served(
    broker: EmbeddedBroker, tmp_path: Path, hang_registry: ModelRegistry
) -> None:
    settings = settings_for(broker.bootstrap, f"sqlite:///{tmp_path / 'h.db'}")
    worker = Worker(settings, hang_registry)
    async with worker:
        with InferlaneClient(broker.bootstrap) as client:
            await asyncio.to_thread(client.watch_results)
            first = await asyncio.to_thread(client.publish, hang_requests("a", 20, hang_at=10))
            digits = await asyncio.to_thread(client.publish, digits_requests(100))
            results = await asyncio.to_thread(client.results, first + digits, timeout_s=90)
            # The replacement thread serves the hung model's later requests too.
            later = await asyncio.to_thread(client.publish, hang_requests("b", 20))
            results |= await asyncio.to_thread(client.results, later, timeout_s=60)

    assert results["a-10"].status == Status.ERROR
    assert results["a-10"].error is not None and results["a-10"].error.code == "model_timeout"
    for rid, result in results.items():  # only the hung request's batch shares its fate
        if result.status != Status.OK:
            assert result.error is not None and result.error.code == "model_timeout", rid
            assert rid.startswith("a-"), rid
    assert all(results[rid].status == Status.OK for rid in digits + later)
    timed_out = {rid for rid, r in results.items() if r.status != Status.OK}
    dead = await asyncio.to_thread(
        read_topic, broker.bootstrap, settings.topics.dead_letters, len(timed_out)
    )
    assert {d.key.decode() for d in dead} == timed_out
    assert {dict(d.headers)[DeadLetterHeaders.CODE] for d in dead} == {b"model_timeout"}
    hung = worker.metrics.registry.get_sample_value(
        "inferlane_hung_compute_threads_total", {"model": "hang"}
    )
    assert hung == 1.0


async def test_past_the_hung_thread_limit_the_worker_fails_for_a_restart(
    broker: EmbeddedBroker, tmp_path: Path, hang_registry: ModelRegistry
) -> None:
    settings = settings_for(
        broker.bootstrap,
        f"sqlite:///{tmp_path / 'u.db'}",
        compute=ComputeConfig(max_hung_threads=1),
    )
    stop = asyncio.Event()
    with InferlaneClient(broker.bootstrap) as client:
        await asyncio.to_thread(client.publish, hang_requests("u", 3, hang_at=1))
    with pytest.raises(ComputeUnhealthy):
        await asyncio.wait_for(run_until(Worker(settings, hang_registry), stop), 120)
