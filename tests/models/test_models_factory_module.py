"""A factory module beside the registry imports without PYTHONPATH; the trust rule that
guards the registry guards that module too."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from worker.models import RegistryFile
from worker.models.loaders import load_factory

FACTORY = """
from torch import nn


def build():
    return nn.Linear(4, 1)
"""


def registry(folder: Path, factory: str) -> Path:
    """A registry naming ``factory``, with weights that fit ``nn.Linear(4, 1)``."""
    torch.manual_seed(1)
    save_file(nn.Linear(4, 1).state_dict(), folder / "w.safetensors")
    path = folder / "registry.toml"
    path.write_text(
        f'[[models]]\nname = "lin"\nversion = "1"\nformat = "factory"\nfactory = "{factory}"\n'
        'path = "w.safetensors"\nadapter = { kind = "regressor", features = 4 }\n'
    )
    return path


def loaded(path: Path) -> nn.Module:
    module = load_factory(RegistryFile.from_toml(path).models[0])
    assert isinstance(module, nn.Module)
    return module


@pytest.fixture
def unique() -> Iterator[str]:
    """A module name no other test imports (modules stay imported for the process)."""
    name = f"guide_factory_{len(sys.modules)}_{id(object())}"
    yield name
    for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
        del sys.modules[key]


def test_a_module_beside_the_registry_is_found(tmp_path: Path, unique: str) -> None:
    (tmp_path / f"{unique}.py").write_text(FACTORY)
    assert str(tmp_path) not in sys.path
    module = loaded(registry(tmp_path, f"{unique}:build"))
    torch.manual_seed(1)
    expected = nn.Linear(4, 1)  # the weights registry() saved, not build()'s fresh ones
    torch.testing.assert_close(module(torch.ones(2, 4)), expected(torch.ones(2, 4)))


def test_a_package_beside_the_registry_is_found(tmp_path: Path, unique: str) -> None:
    package = tmp_path / unique
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "nets.py").write_text(FACTORY)
    assert loaded(registry(tmp_path, f"{unique}.nets:build")).in_features == 4


def test_an_installed_module_still_imports(tmp_path: Path) -> None:
    """Nothing of that name beside the registry: the installed package serves."""
    path = registry(tmp_path, "torch.nn:Identity")
    with pytest.raises(RuntimeError, match="Unexpected key"):  # Identity has no weights
        loaded(path)


def test_a_missing_module_says_where_it_was_looked_for(tmp_path: Path) -> None:
    with pytest.raises(ModuleNotFoundError, match=f"neither in {tmp_path}.*PYTHONPATH"):
        loaded(registry(tmp_path, "no_such_module_anywhere:build"))


def test_a_missing_function_is_named(tmp_path: Path, unique: str) -> None:
    (tmp_path / f"{unique}.py").write_text(FACTORY)
    with pytest.raises(ImportError, match=f"{unique} has no function make"):
        loaded(registry(tmp_path, f"{unique}:make"))


def test_a_world_writable_module_is_refused_before_it_runs(tmp_path: Path, unique: str) -> None:
    marker = tmp_path / "ran"
    module = tmp_path / f"{unique}.py"
    module.write_text(f"open({str(marker)!r}, 'w').close()\n" + FACTORY)
    module.chmod(0o666)
    with pytest.raises(PermissionError, match=r"refusing the factory module.*chmod o-w"):
        loaded(registry(tmp_path, f"{unique}:build"))
    assert not marker.exists() and unique not in sys.modules


def test_a_name_taken_by_another_folder_is_refused(tmp_path: Path, unique: str) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    for folder in (first, second):
        folder.mkdir()
        (folder / f"{unique}.py").write_text(FACTORY)
    loaded(registry(first, f"{unique}:build"))
    with pytest.raises(ImportError, match=r"already imported from .*a/.*rename yours"):
        loaded(registry(second, f"{unique}:build"))
