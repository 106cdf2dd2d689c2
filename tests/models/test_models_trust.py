"""The registry is trusted configuration (it names code to run): one that every user of
the machine could rewrite is refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from worker.models import RegistryFile

TOML = """
[[models]]
name = "house"
version = "1"
format = "factory"
factory = "mypkg.models:build"
path = "house.safetensors"
adapter = { kind = "regressor", features = 10 }
"""


def registry_in(folder: Path, mode: int = 0o644) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / "registry.toml"
    path.write_text(TOML)
    path.chmod(mode)
    return path


def test_a_private_registry_loads(tmp_path: Path) -> None:
    assert [m.name for m in RegistryFile.from_toml(registry_in(tmp_path / "r")).models] == ["house"]


def test_a_world_writable_registry_file_is_refused(tmp_path: Path) -> None:
    path = registry_in(tmp_path / "r", 0o666)
    with pytest.raises(PermissionError, match="writable by every user"):
        RegistryFile.from_toml(path)


def test_a_registry_in_a_world_writable_folder_is_refused(tmp_path: Path) -> None:
    path = registry_in(tmp_path / "r")
    path.parent.chmod(0o777)
    with pytest.raises(PermissionError, match="chmod o-w"):
        RegistryFile.from_toml(path)


def test_a_sticky_shared_folder_is_accepted(tmp_path: Path) -> None:
    """Like /tmp: others may add files there but not replace this one."""
    path = registry_in(tmp_path / "r")
    os.chmod(path.parent, 0o1777)
    assert len(RegistryFile.from_toml(path).models) == 1
