"""Compose a running worker: broker (embedded when none is configured), models, signals."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import signal
import tomllib
from collections.abc import Iterator
from pathlib import Path

import torch
from pydantic import ValidationError

from worker.cli.errors import UsageFailed, problems
from worker.demo.models import ensure_demo_models
from worker.facade import Worker
from worker.intake.broker import EmbeddedBroker
from worker.models import ModelRegistry, RegistryFile
from worker.ops.metrics import WorkerMetrics
from worker.settings import WorkerSettings


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


def resolve_device(device: str) -> torch.device:
    """``auto``: the current CUDA device when there is one, else the CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


@contextlib.contextmanager
def with_broker(settings: WorkerSettings) -> Iterator[WorkerSettings]:
    """Settings whose ``bootstrap`` is set: the configured one, or an embedded broker's."""
    if settings.bootstrap is not None:
        yield settings
        return
    with EmbeddedBroker() as broker:
        yield settings.model_copy(update={"bootstrap": broker.bootstrap})


# glibc's mallopt parameter for the arena count.
_M_ARENA_MAX = -8


def tune_process(settings: WorkerSettings) -> None:
    """Process-wide settings, applied once by the process that owns the worker."""
    if settings.torch_threads is not None:
        torch.set_num_threads(settings.torch_threads)
    # glibc gives each thread that allocates its own arena (up to 8 per core) and keeps
    # freed memory in them: RSS then creeps up over a long run while Python's own memory
    # stays flat (seen in the soak benchmark). Two arenas are plenty for our few threads.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").mallopt(_M_ARENA_MAX, 2)


async def serve(
    settings: WorkerSettings,
    registry: ModelRegistry,
    *,
    stop: asyncio.Event | None = None,
    metrics: WorkerMetrics | None = None,
) -> None:
    """Run until SIGINT/SIGTERM (or ``stop``), then drain and exit cleanly."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await Worker(settings, registry, metrics=metrics).run(stop)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
