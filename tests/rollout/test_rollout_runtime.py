"""The rollout stage without a broker: its ticks against a real store and registry."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from prometheus_client import CollectorRegistry

from storage import ResultStore
from storage.rollouts import RolloutRecord, RolloutStore
from worker.config import RolloutConfig
from worker.models import ModelRegistry
from worker.models.adapters import Adapter
from worker.models.demo import RECIPE_VERSION
from worker.models.loaders import load_model
from worker.models.model import LoadedModel
from worker.models.specs import ModelSpec
from worker.rollout.begin import begin
from worker.rollout.metrics import RolloutMetrics
from worker.rollout.plan import Mode, RolloutPlan
from worker.rollout.routing import Router
from worker.rollout.runtime import Rollouts


def registry_text(models: Path) -> str:
    """digits and diabetes at version 1, each with a candidate version 2 (the same weights)."""
    bodies = {
        "digits": f'format = "export"\npath = "{models / f"digits-{RECIPE_VERSION}.pt2"}"\n'
        'adapter = { kind = "classifier", features = 64, num_classes = 10, shapes = [[8, 8]] }',
        "diabetes": 'format = "factory"\nfactory = "worker.models.demo:build_diabetes"\n'
        f'path = "{models / f"diabetes-{RECIPE_VERSION}.safetensors"}"\n'
        'adapter = { kind = "regressor", features = 10 }',
    }
    return "".join(
        f'\n[[{table}]]\nname = "{name}"\nversion = "{version}"\n{body}\n'
        for table, version in (("models", "1"), ("candidates", "2"))
        for name, body in bodies.items()
    )


def eventually(check: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def store(db_url: str) -> Iterator[RolloutStore]:
    with ResultStore(db_url) as results:  # migrates
        yield RolloutStore(results.engine)


def test_a_slow_candidate_warm_up_holds_up_no_other_models_rollout(
    store: RolloutStore, demo_registry_path: Path, tmp_path: Path
) -> None:
    release = threading.Event()  # digits 2's load waits for it

    def loader(spec: ModelSpec, device: torch.device, adapter: Adapter) -> LoadedModel:
        if (spec.name, spec.version) == ("digits", "2"):
            release.wait(60)
        return load_model(spec, device, adapter)

    path = tmp_path / "registry.toml"
    path.write_text(registry_text(demo_registry_path.parent))
    registry = ModelRegistry.from_toml(path, loader=loader)
    plan = RolloutPlan(mode=Mode.CANARY, steps=[100], interval_s=1)
    started: dict[str, RolloutRecord] = {}
    for name in ("digits", "diabetes"):
        candidate = registry.candidates()[f"{name}@2"]
        started[name] = begin(store, registry.spec(name), candidate, plan)
    router = Router()
    rollouts = Rollouts(
        store, registry, RolloutMetrics(CollectorRegistry()), RolloutConfig(), router
    )

    def tick() -> bool:
        ticking = threading.Thread(target=rollouts.tick)
        ticking.start()
        ticking.join(30)
        return not ticking.is_alive()

    try:
        assert tick()  # while digits 2 is still loading
        assert eventually(lambda: tick() and router.route("diabetes", "r") == "diabetes@2")
        # Each tick of the diabetes rollout judges it: its interval ends with a decision.
        assert eventually(lambda: tick() and len(store.events(started["diabetes"].id)) > 1)
        assert router.route("digits", "r") == "digits"  # not before its candidate is warm
        assert not registry.on_device("digits@2")

        release.set()
        assert eventually(lambda: tick() and router.route("digits", "r") == "digits@2")
        assert registry.on_device("digits@2")
    finally:
        release.set()
        asyncio.run(rollouts.stop())
