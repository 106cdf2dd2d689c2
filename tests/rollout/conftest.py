"""A registry with digits and two candidate versions of it: the same weights (an
equivalent candidate) and noisy weights (a worse one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from worker.models import RegistryFile
from worker.models.demo import write_worse_digits

ADAPTER = '{ kind = "classifier", features = 64, num_classes = 10, shapes = [[8, 8]] }'


def entry(table: str, version: str, path: Path) -> str:
    return f"""
[[{table}]]
name = "digits"
version = "{version}"
format = "export"
path = {json.dumps(str(path))}
adapter = {ADAPTER}
"""


@pytest.fixture(scope="session")
def rollout_registry_path(
    demo_registry_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    folder = tmp_path_factory.mktemp("rollout-models")
    digits = next(
        m for m in RegistryFile.from_toml(demo_registry_path).models if m.name == "digits"
    )
    worse = folder / "digits-worse.pt2"
    write_worse_digits(worse)
    path = folder / "registry.toml"
    path.write_text(
        entry("models", "1", digits.path)
        + entry("candidates", "2", digits.path)
        + entry("candidates", "worse", worse)
    )
    return path
