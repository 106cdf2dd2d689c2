"""Fixtures for the model store: digits copies under different names, store budgets."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker.demo.copies import write_copies


@pytest.fixture(scope="session")
def copies_path(demo_registry_path: Path) -> Path:
    """A registry of eight digits classifiers, each with its own weights file."""
    return write_copies(demo_registry_path.parent, 8)


def registry_text(demo: Path, missing: Path) -> str:
    """The demo's digits, a copy whose weights file is missing, and a text model whose
    tokenizer is missing (its adapter cannot be built)."""
    return (demo / "registry.toml").read_text().replace(
        'path = "digits-1.pt2"', f'path = "{demo / "digits-1.pt2"}"'
    ).split('[[models]]\nname = "diabetes"')[0] + (
        f'[[models]]\nname = "lost"\nversion = "1"\nformat = "export"\npath = "{missing}"\n'
        'adapter = { kind = "classifier", features = 64, num_classes = 10 }\n\n'
        f'[[models]]\nname = "mute"\nversion = "1"\nformat = "hf"\npath = "{missing}"\n'
        f'adapter = {{ kind = "text_embedding", tokenizer = "{missing}.json" }}\n'
    )


@pytest.fixture
def broken_registry(tmp_path: Path, demo_registry_path: Path) -> Path:
    path = tmp_path / "registry.toml"
    path.write_text(registry_text(demo_registry_path.parent, tmp_path / "lost.pt2"))
    return path
