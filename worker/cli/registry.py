"""The model registry a command names (or the demo's), checked before anything starts:
a file that does not parse, validate, or name files that exist is a usage error."""

from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import ValidationError

from worker.cli.errors import UsageFailed, problems
from worker.demo.models import ensure_demo_models
from worker.launch import resolve_device
from worker.models import ModelRegistry, RegistryFile


def load_registry(models: Path | None, device: str = "auto") -> ModelRegistry:
    """The registry TOML given, or the demo models (built and cached on first use), with
    its models on ``device`` (a ``WorkerSettings.device`` value). A registry that does
    not parse, validate, or name files that exist raises ``UsageFailed``."""
    path = models if models is not None else ensure_demo_models()
    check_registry(path)
    return ModelRegistry.from_toml(path, device=resolve_device(device))


def check_registry(path: Path) -> RegistryFile:
    """The registry file, whose models' files exist; ``UsageFailed`` naming the file and
    what is wrong in it."""
    file = read_registry(path)
    for spec in [*file.models, *file.candidates]:
        if not spec.path.exists():
            raise UsageFailed(
                f"model registry {path}: {spec.name} version {spec.version} names "
                f"{spec.path}, which does not exist",
                "fix its path (relative paths start at the registry's folder)",
            )
    return file


def read_registry(path: Path) -> RegistryFile:
    """The registry file as written; ``UsageFailed`` when it does not parse or validate."""
    try:
        return RegistryFile.from_toml(path)
    except FileNotFoundError:
        raise UsageFailed(
            f"no model registry at {path}", "check --models (or INFERLANE_MODELS)"
        ) from None
    except (OSError, tomllib.TOMLDecodeError) as exc:  # unreadable, world-writable, not TOML
        raise UsageFailed(f"model registry {path}: {exc}") from None
    except ValidationError as exc:
        raise UsageFailed(f"model registry {path}: {problems(exc)}") from None
