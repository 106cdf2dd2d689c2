"""Finding 5 end to end: broken models never stop intake or the other models."""

from __future__ import annotations

import asyncio
from pathlib import Path

from consumers.client import InferlaneClient
from consumers.contract import Status
from worker.broker import EmbeddedBroker
from worker.config import WorkerSettings
from worker.models import ModelRegistry
from worker.service import Worker
from worker.workload import digits_requests


async def test_worker_serves_the_others_while_models_are_unavailable(
    broker: EmbeddedBroker, tmp_path: Path, broken_registry: Path
) -> None:
    registry = ModelRegistry.from_toml(broken_registry)
    settings = WorkerSettings(
        bootstrap=broker.bootstrap, database_url=f"sqlite:///{tmp_path / 'r.db'}"
    )
    good = digits_requests(40)
    broken = [
        {"request_id": f"lost-{i}", "model": "lost", "inputs": [0.0] * 64} for i in range(5)
    ] + [{"request_id": f"mute-{i}", "model": "mute", "inputs": "some text"} for i in range(5)]
    async with Worker(settings, registry) as worker:
        with InferlaneClient(broker.bootstrap) as client:
            await asyncio.to_thread(client.watch_results)
            ids = await asyncio.to_thread(client.publish, good[:20])
            ids += await asyncio.to_thread(client.publish, broken)
            ids += await asyncio.to_thread(client.publish, good[20:])
            results = await asyncio.to_thread(client.results, ids, timeout_s=90)
        metrics = worker.metrics.registry  # the store's metrics sit on the worker's registry
        assert metrics.get_sample_value("inferlane_model_unavailable", {"model": "lost"}) == 1
        assert metrics.get_sample_value("inferlane_model_tier_bytes", {"tier": "device"}) > 0
    for request in good:
        assert results[request.request_id].status == Status.OK
    for i in range(5):
        lost, mute = results[f"lost-{i}"], results[f"mute-{i}"]
        assert lost.status == Status.ERROR and lost.error is not None
        assert lost.error.code == "model_unavailable"
        assert mute.status == Status.REJECTED and mute.error is not None
        assert mute.error.code == "model_unavailable"
