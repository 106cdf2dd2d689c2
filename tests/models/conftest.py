"""Fixtures for the model store: digits copies under different names, store budgets."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker.models.copies import write_copies


@pytest.fixture(scope="session")
def copies_path(demo_registry_path: Path) -> Path:
    """A registry of eight digits classifiers, each with its own weights file."""
    return write_copies(demo_registry_path.parent, 8)
