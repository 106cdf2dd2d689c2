"""Drift settings: the worker's [drift] section and a model's [models.drift] table."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from worker.models import RegistryFile
from worker.settings import WorkerSettings

REGISTRY = """
[[models]]
name = "digits"
version = "1"
format = "export"
path = "digits.pt2"
adapter = { kind = "classifier", features = 64, num_classes = 10 }

[models.drift]
psi_max = 0.2
reference_model = "digits-eager"

[[models]]
name = "digits-eager"
version = "1"
format = "export"
path = "digits.pt2"
adapter = { kind = "classifier", features = 64, num_classes = 10 }
"""


def test_a_registry_entry_carries_its_drift_thresholds(tmp_path: Path) -> None:
    path = tmp_path / "models.toml"
    path.write_text(REGISTRY)
    digits, eager = RegistryFile.from_toml(path).models
    assert digits.drift is not None
    assert (digits.drift.psi_max, digits.drift.reference_model) == (0.2, "digits-eager")
    assert digits.drift.js_max == 0.1  # the rest keep their defaults
    assert eager.drift is None


def test_unknown_drift_keys_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "models.toml"
    path.write_text(REGISTRY.replace("psi_max = 0.2", "psi_maxx = 0.2"))
    with pytest.raises(ValidationError, match="psi_maxx"):
        RegistryFile.from_toml(path)


def test_worker_drift_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERLANE_DRIFT__WINDOW_S", "300")
    monkeypatch.setenv("INFERLANE_DRIFT__THRESHOLDS__PSI_MAX", "0.3")
    settings = WorkerSettings()
    assert settings.drift.window_s == 300
    assert settings.drift.thresholds.psi_max == 0.3
    assert settings.drift.labels_topic == "inferlane.labels"
