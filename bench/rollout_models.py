"""The rollout benchmark's and tests' models: the demo digits with two candidates."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from worker.demo.models import (
    RECIPE_VERSION,
    SEED,
    atomic_file,
    cache_lock,
    default_cache_dir,
    ensure_demo_models,
    export_digits,
    train_digits,
)


def write_worse_digits(path: Path, noise: float = 2.0, seed: int = SEED) -> None:
    """The digits classifier with Gaussian noise added to its weights: a worse version
    of it, for rollout demos and tests (a candidate that must be rolled back)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = train_digits()
        with torch.no_grad():
            for layer in model.modules():
                if isinstance(layer, nn.Linear):
                    layer.weight.add_(torch.randn_like(layer.weight) * noise * layer.weight.std())
    export_digits(model, path)


def ensure_rollout_models(cache_dir: Path | None = None) -> Path:
    """The demo digits with two candidate versions, for rollout demos and tests: "2"
    (the same weights: an equivalent candidate) and "worse" (noisy weights). Returns
    the path of a registry TOML holding digits and the two ``[[candidates]]``."""
    folder = cache_dir or default_cache_dir()
    ensure_demo_models(folder)
    digits = folder / f"digits-{RECIPE_VERSION}.pt2"
    worse = folder / f"digits-worse-{RECIPE_VERSION}.pt2"
    registry = folder / "rollout-registry.toml"
    adapter = '{ kind = "classifier", features = 64, num_classes = 10, shapes = [[8, 8]] }'
    entries = [("models", "1", digits), ("candidates", "2", digits), ("candidates", "worse", worse)]
    text = "".join(
        f'\n[[{table}]]\nname = "digits"\nversion = "{version}"\nformat = "export"\n'
        f"path = {json.dumps(path.name)}\nadapter = {adapter}\n"
        for table, version, path in entries
    )
    with cache_lock(folder):
        if not worse.exists():
            write_worse_digits(worse)
        if not registry.exists() or registry.read_text() != text:
            with atomic_file(registry) as tmp:
                tmp.write_text(text)
    return registry
