"""The generative demo model (tinylm), trained once per session into a temporary folder,
and a registry that serves it alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker.demo.generative_model import generative_entry, write_generative_demo
from worker.models import ModelRegistry


@pytest.fixture(scope="session")
def tinylm_registry_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tinylm")
    write_generative_demo(folder / "tinylm-1")
    registry = folder / "registry.toml"
    registry.write_text(generative_entry("tinylm-1"))
    return registry


@pytest.fixture(scope="session")
def tinylm_registry(tinylm_registry_path: Path) -> ModelRegistry:
    return ModelRegistry.from_toml(tinylm_registry_path)
