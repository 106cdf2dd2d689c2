"""The demo digits with two candidate versions: "2" (the same weights, an equivalent
candidate) and "worse" (noisy weights)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.rollout_models import ensure_rollout_models


@pytest.fixture(scope="session")
def rollout_registry_path(demo_registry_path: Path) -> Path:
    return ensure_rollout_models(demo_registry_path.parent)
