"""Registry changes while running: add, remove, new version, without a restart."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from consumers.client import InferlaneClient
from consumers.contract import Status
from consumers.errors import UnknownModel
from worker.demo.workload import digits_requests
from worker.facade import Worker
from worker.intake.broker import EmbeddedBroker
from worker.models import ModelRegistry
from worker.settings import ModelStoreConfig, WorkerSettings


def entry(name: str, version: str, weights: Path) -> str:
    return (
        f'[[models]]\nname = "{name}"\nversion = "{version}"\nformat = "export"\n'
        f'path = "{weights}"\n'
        'adapter = { kind = "classifier", features = 64, num_classes = 10 }\n\n'
    )


@pytest.fixture
def weights(demo_registry_path: Path) -> Path:
    return demo_registry_path.parent / "digits-1.pt2"


def test_reload_adds_removes_and_replaces(tmp_path: Path, weights: Path) -> None:
    path = tmp_path / "registry.toml"
    path.write_text(entry("a", "1", weights) + entry("b", "1", weights))
    registry = ModelRegistry.from_toml(path)
    try:
        old_a = registry.ensure("a").result()
        registry.ensure("b").result()
        assert registry.adapters_built()
        path.write_text(entry("a", "2", weights) + entry("c", "1", weights))
        changes = registry.reload()
        assert (changes.added, changes.removed, changes.replaced) == (["c"], ["b"], ["a"])
        assert not registry.adapters_built()  # the urgent intake admits off the loop now
        assert registry.names() == ["a", "c"]
        new_a = registry.ensure("a").result()
        assert (old_a.version, new_a.version) == ("1", "2") and new_a is not old_a
        item = old_a.adapter.prepare([0.0] * 64)
        assert old_a.run([item]) == new_a.run([item])  # a batch that started on 1 finishes
        assert "b" not in registry.placements()
        assert registry.spec("b").version == "1"  # requests already queued still resolve
        with pytest.raises(UnknownModel, match="removed"):
            registry.get("b")
        assert registry.ensure("c").result().name == "c"
        assert registry.adapters_built()
        path.write_text("[[models]]\nname = 'broken'\n")
        with pytest.raises(ValueError):
            registry.reload()
        assert registry.names() == ["a", "c"]  # an invalid file leaves the last good one
    finally:
        registry.close()


async def test_version_swap_while_requests_flow(
    broker: EmbeddedBroker, tmp_path: Path, weights: Path
) -> None:
    path = tmp_path / "registry.toml"
    path.write_text(entry("digits", "1", weights))
    registry = ModelRegistry.from_toml(path)
    settings = WorkerSettings(
        bootstrap=broker.bootstrap,
        database_url=f"sqlite:///{tmp_path / 'r.db'}",
        model_store=ModelStoreConfig(watch_interval_s=0.05),
    )
    before, after = digits_requests(300, prefix="v1"), digits_requests(100, prefix="v2")
    async with Worker(settings, registry):
        with InferlaneClient(broker.bootstrap) as client:
            await asyncio.to_thread(client.watch_results)
            ids = await asyncio.to_thread(client.publish, before[:150])
            path.write_text(entry("digits", "2", weights))  # swapped while they flow
            ids += await asyncio.to_thread(client.publish, before[150:])
            deadline = time.monotonic() + 30
            while registry.spec("digits").version != "2" and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            late = await asyncio.to_thread(client.publish, after)
            results = await asyncio.to_thread(client.results, ids + late, timeout_s=90)
    assert all(r.status == Status.OK for r in results.values())
    assert {results[i].model_version for i in ids} <= {"1", "2"}
    assert {results[i].model_version for i in late} == {"2"}
