"""Copies of a demo model under different names, for tier tests and the store benchmark."""

from __future__ import annotations

import shutil
from pathlib import Path

from worker.demo.models import RECIPE_VERSION, ensure_demo_models

COPY_PREFIX = "digits-copy-"


def write_copies(folder: Path, copies: int) -> Path:
    """``copies`` digits classifiers, each with its own weights file, in ``folder/copies``;
    returns that registry's path (the demo registry sits in ``folder``)."""
    source = ensure_demo_models(folder).parent / f"digits-{RECIPE_VERSION}.pt2"
    target = folder / "copies"
    target.mkdir(exist_ok=True)
    entries = []
    for i in range(1, copies + 1):
        name = f"{COPY_PREFIX}{i}"
        weights = target / f"{name}.pt2"
        if not weights.exists():
            shutil.copyfile(source, weights)
        entries.append(
            f'[[models]]\nname = "{name}"\nversion = "{RECIPE_VERSION}"\nformat = "export"\n'
            f'path = "{weights.name}"\n'
            'adapter = { kind = "classifier", features = 64, num_classes = 10 }\n'
        )
    registry = target / "registry.toml"
    registry.write_text("\n".join(entries))
    return registry
