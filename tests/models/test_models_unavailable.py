"""A model that cannot load or cannot build its adapter is unavailable on its own:
``model_unavailable`` for its requests, a background retry with backoff, and the other
models (and the worker's intake) keep serving."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
import torch
from prometheus_client import CollectorRegistry

from consumers.errors import ModelUnavailable
from worker.models import Adapter, LoadedModel, ModelRegistry, ModelSpec, load_model
from worker.settings import ModelStoreConfig

GOOD = "digits"


class CountingLoader:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, spec: ModelSpec, device: torch.device, adapter: Adapter) -> LoadedModel:
        self.calls += 1
        return load_model(spec, device, adapter)


def wait_until(condition: object, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    return False


def test_adapter_that_cannot_be_built_is_model_unavailable(broken_registry: Path) -> None:
    registry = ModelRegistry.from_toml(broken_registry)
    with pytest.raises(ModelUnavailable, match="'mute': its adapter cannot be built"):
        registry.adapter("mute")
    with pytest.raises(ModelUnavailable, match="attempt 1"):  # no rebuild inside the backoff
        registry.adapter("mute")
    assert registry.adapter(GOOD).prepare([0.0] * 64) is not None


def test_failed_load_backs_off_and_recovers_in_the_background(
    broken_registry: Path, demo_registry_path: Path
) -> None:
    loader = CountingLoader()
    config = ModelStoreConfig(retry_backoff_s=0.2, retry_backoff_max_s=0.4)
    registry = ModelRegistry.from_toml(broken_registry, loader=loader, config=config)
    collector = CollectorRegistry()
    registry.configure(config, collector)
    try:
        with pytest.raises(ModelUnavailable) as first:
            registry.ensure("lost").result()
        assert first.value.code == "model_unavailable"
        calls = loader.calls
        for _ in range(20):  # batches inside the backoff do not try to load again
            with pytest.raises(ModelUnavailable):
                registry.get("lost")
        assert loader.calls == calls
        assert registry.ensure(GOOD).result().run([registry.adapter(GOOD).prepare([0.0] * 64)])
        # Retried in the background, with nobody asking, until the file is there.
        assert wait_until(lambda: loader.calls >= calls + 2)
        shutil.copyfile(
            demo_registry_path.parent / "digits-1.pt2", broken_registry.parent / "lost.pt2"
        )
        assert wait_until(lambda: "lost" in registry.placements())
        assert collector.get_sample_value("inferlane_model_unavailable", {"model": "lost"}) == 0
        assert registry.ensure("lost").result().name == "lost"
    finally:
        registry.close()
