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
from storage.rollouts import PROMOTED, RolloutRecord, RolloutStore
from worker.demo.models import RECIPE_VERSION
from worker.execution.executor import ThreadExecutor
from worker.models import ModelRegistry
from worker.models.adapters import Adapter
from worker.models.loaders import load_model
from worker.models.model import LoadedModel
from worker.models.specs import ModelSpec
from worker.rollout.begin import begin
from worker.rollout.metrics import RolloutMetrics
from worker.rollout.routing import Router
from worker.rollout.runtime import Rollouts
from worker.settings import RolloutConfig
from worker.settings.rollout_plan import Mode, RolloutPlan


def registry_text(models: Path, *, candidates: bool = True) -> str:
    """digits and diabetes at version 1, each with a candidate version 2 (the same
    weights) unless ``candidates`` is False."""
    bodies = {
        "digits": f'format = "export"\npath = "{models / f"digits-{RECIPE_VERSION}.pt2"}"\n'
        'adapter = { kind = "classifier", features = 64, num_classes = 10, shapes = [[8, 8]] }',
        "diabetes": 'format = "factory"\nfactory = "worker.demo.models:build_diabetes"\n'
        f'path = "{models / f"diabetes-{RECIPE_VERSION}.safetensors"}"\n'
        'adapter = { kind = "regressor", features = 10 }',
    }
    return "".join(
        f'\n[[{table}]]\nname = "{name}"\nversion = "{version}"\n{body}\n'
        for table, version in (("models", "1"), ("candidates", "2"))[: 2 if candidates else 1]
        for name, body in bodies.items()
    )


def tick(rollouts: Rollouts) -> bool:
    """One tick, in a thread: False when it has not returned within 30 s."""
    ticking = threading.Thread(target=rollouts.tick)
    ticking.start()
    ticking.join(30)
    return not ticking.is_alive()


def ticked_until(rollouts: Rollouts, done: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    """Tick until ``done``: False when a tick hangs or ``timeout_s`` passes first."""
    deadline = time.monotonic() + timeout_s
    while tick(rollouts) and not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return done()


def new_rollouts(store: RolloutStore, registry: ModelRegistry, router: Router) -> Rollouts:
    metrics = RolloutMetrics(CollectorRegistry())
    executor = ThreadExecutor(registry.get)  # where sampled batches run on the other version
    return Rollouts(store, registry, metrics, RolloutConfig(), router, compare_on=executor.submit)


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
    rollouts = new_rollouts(store, registry, router)
    try:
        assert tick(rollouts)  # while digits 2 is still loading
        assert ticked_until(rollouts, lambda: router.route("diabetes", "r") == "diabetes@2")
        # Each tick of the diabetes rollout judges it: its interval ends with a decision.
        assert ticked_until(rollouts, lambda: len(store.events(started["diabetes"].id)) > 1)
        assert router.route("digits", "r") == "digits"  # not before its candidate is warm
        assert not registry.on_device("digits@2")

        release.set()
        assert ticked_until(rollouts, lambda: router.route("digits", "r") == "digits@2")
        assert registry.on_device("digits@2")
    finally:
        release.set()
        asyncio.run(rollouts.stop())


class CountingStore(RolloutStore):
    """Counts the full reads of the rollouts."""

    reads = 0

    def current(self) -> list[RolloutRecord]:
        self.reads += 1
        return super().current()


def test_an_idle_tick_reads_no_rollouts_yet_misses_no_change(
    db_url: str, demo_registry_path: Path, tmp_path: Path
) -> None:
    path = tmp_path / "registry.toml"
    path.write_text(registry_text(demo_registry_path.parent))
    registry = ModelRegistry.from_toml(path)
    with ResultStore(db_url) as ours, ResultStore(db_url) as theirs:  # theirs: the CLI's
        store, cli = CountingStore(ours.engine), RolloutStore(theirs.engine)
        router = Router()
        rollouts = new_rollouts(store, registry, router)
        try:
            for _ in range(3):
                rollouts.tick()
            assert store.reads == 1  # the first tick; then only the newest id

            plan = RolloutPlan(mode=Mode.CANARY, steps=[100], interval_s=60)
            started = begin(cli, registry.spec("digits"), registry.candidates()["digits@2"], plan)
            assert ticked_until(rollouts, lambda: router.route("digits", "r") == "digits@2")
            reads = store.reads
            rollouts.tick()
            assert store.reads == reads + 1  # running: read and judged every tick

            ended = cli.decide(
                started, decision="promote", state=PROMOTED, step=0, share=1.0, passes=1,
                interval_start=started.interval_start, gates={}, reason="by hand",
            )  # fmt: skip
            assert ended is not None
            rollouts.tick()
            assert rollouts.status()[0]["state"] == PROMOTED
            reads = store.reads
            rollouts.tick()
            rollouts.tick()
            assert store.reads == reads  # ended: idle again
            assert router.route("digits", "r") == "digits@2"

            # The candidate made the primary in the file: nothing is left to route.
            path.write_text(registry_text(demo_registry_path.parent, candidates=False))
            registry.reload()
            rollouts.tick()
            assert router.route("digits", "r") == "digits"
        finally:
            asyncio.run(rollouts.stop())
