from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from consumers.errors import UnknownModel
from worker.models import (
    Adapter,
    ClassifierAdapter,
    LoadedModel,
    ModelRegistry,
    ModelSpec,
    RegistryFile,
)

TOML = """
[[models]]
name = "digits"
version = "3"
format = "export"
path = "weights/digits.pt2"
max_batch = 64
adapter = { kind = "classifier", features = 64, num_classes = 10, shapes = [[8, 8]] }

[[models]]
name = "house"
version = "1"
format = "factory"
factory = "mypkg.models:build"
path = "/abs/house.safetensors"
adapter = { kind = "regressor", features = 10 }
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "registry.toml"
    path.write_text(text)
    return path


def test_toml_parses_and_resolves_relative_paths(tmp_path: Path) -> None:
    models = RegistryFile.from_toml(write(tmp_path, TOML)).models
    digits, house = models
    assert digits.path == tmp_path.resolve() / "weights/digits.pt2"
    assert house.path == Path("/abs/house.safetensors")
    assert (digits.max_batch, house.max_batch) == (64, 256)
    assert digits.adapter.kind == "classifier" and digits.adapter.shapes == [(8, 8)]
    assert house.factory == "mypkg.models:build"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (('format = "factory"', 'format = "export"'), "'factory'.*is required for format"),
        (('factory = "mypkg.models:build"\n', ""), "'factory'.*is required for format"),
        (('format = "export"', 'format = "onnx"'), "format"),
        (('kind = "regressor"', 'kind = "ranker"'), "does not match any of the expected tags"),
        (('name = "house"', 'name = "digits"'), "duplicate model names: digits"),
        (("features = 10 }", "features = 10, extra = 1 }"), "Extra inputs are not permitted"),
    ],
)
def test_invalid_registry_files_say_why(
    tmp_path: Path, change: tuple[str, str], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        RegistryFile.from_toml(write(tmp_path, TOML.replace(*change)))


class CountingLoader:
    """Stands in for weight loading: counts loads and makes them slow enough to race."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, spec: ModelSpec, device: torch.device, adapter: Adapter) -> LoadedModel:
        self.calls += 1
        time.sleep(0.05)
        return LoadedModel(
            spec.name, spec.version, torch.nn.Linear(64, 10), adapter, spec.max_batch, device
        )


def test_get_loads_once_across_threads(tmp_path: Path) -> None:
    loader = CountingLoader()
    registry = ModelRegistry(RegistryFile.from_toml(write(tmp_path, TOML)).models, loader=loader)
    assert registry.names() == ["digits", "house"]
    assert isinstance(registry.adapter("digits"), ClassifierAdapter)
    assert loader.calls == 0  # adapters come without weights

    got: list[LoadedModel] = []
    threads = [
        threading.Thread(target=lambda: got.append(registry.get("digits"))) for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert loader.calls == 1 and all(model is got[0] for model in got)
    assert got[0].adapter is registry.adapter("digits")


def test_unknown_model_lists_the_known_ones(tmp_path: Path) -> None:
    registry = ModelRegistry(RegistryFile.from_toml(write(tmp_path, TOML)).models)
    for lookup in (registry.get, registry.spec, registry.adapter, registry.warmup):
        with pytest.raises(UnknownModel, match="unknown model 'nope'; known models: digits, house"):
            lookup("nope")
