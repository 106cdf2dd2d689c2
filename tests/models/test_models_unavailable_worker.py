"""End to end: broken or loading models never stop intake or the other models."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import torch

from consumers.client import InferlaneClient
from consumers.contract import Status
from worker.demo.workload import digits_requests
from worker.facade import Worker
from worker.intake.broker import EmbeddedBroker
from worker.models import Adapter, LoadedModel, ModelRegistry, ModelSpec, load_model
from worker.settings import ModelStoreConfig, WorkerSettings


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


async def test_a_cold_load_blocks_neither_other_models_nor_itself_twice(
    broker: EmbeddedBroker, tmp_path: Path, copies_path: Path
) -> None:
    cold, warm = "digits-copy-1", "digits-copy-2"
    opened = threading.Event()
    opened.set()  # open while the worker warms up
    calls: list[str] = []

    def gated(spec: ModelSpec, device: torch.device, adapter: Adapter) -> LoadedModel:
        calls.append(spec.name)
        assert opened.wait(60)
        return load_model(spec, device, adapter)

    def registry_text(cold_version: str) -> str:
        return "".join(
            f'[[models]]\nname = "{name}"\nversion = "{version}"\nformat = "export"\n'
            f'path = "{copies_path.parent / name}.pt2"\n'
            'adapter = { kind = "classifier", features = 64, num_classes = 10 }\n'
            for name, version in ((cold, cold_version), (warm, "1"))
        )

    path = tmp_path / "registry.toml"
    path.write_text(registry_text("1"))
    registry = ModelRegistry.from_toml(path, loader=gated)
    settings = WorkerSettings(
        bootstrap=broker.bootstrap,
        database_url=f"sqlite:///{tmp_path / 'r.db'}",
        # Room for both on the device (38,952 bytes each); reloads only when told.
        model_store=ModelStoreConfig(device_bytes=100_000, host_bytes=0, watch_interval_s=0),
    )
    async with Worker(settings, registry):
        assert set(registry.placements()) == {cold, warm}
        opened.clear()
        calls.clear()
        path.write_text(registry_text("2"))  # a new version of one: cold until it loads
        await asyncio.to_thread(registry.reload)
        with InferlaneClient(broker.bootstrap) as client:
            await asyncio.to_thread(client.watch_results)
            waiting = [
                {"request_id": f"c{i}", "model": cold, "inputs": [0.0] * 64} for i in range(30)
            ]
            served = [
                {"request_id": f"w{i}", "model": warm, "inputs": [0.0] * 64} for i in range(30)
            ]
            cold_ids = await asyncio.to_thread(client.publish, waiting)
            try:
                while not calls:  # its load has started, and waits at the gate
                    await asyncio.sleep(0.01)
                warm_ids = await asyncio.to_thread(client.publish, served)
                results = await asyncio.to_thread(client.results, warm_ids, timeout_s=60)
                assert all(r.status == Status.OK for r in results.values())
                assert calls == [cold]  # one load under way, for every cold request
            finally:
                opened.set()
            results = await asyncio.to_thread(client.results, cold_ids, timeout_s=60)
            assert all(r.status == Status.OK for r in results.values())
            assert {r.model_version for r in results.values()} == {"2"}
            assert calls == [cold]
