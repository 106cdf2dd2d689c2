"""Compose a running worker: broker (embedded when none is configured), models, signals."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import signal
from collections.abc import Iterator

import torch

from worker.facade import Worker
from worker.intake.broker import EmbeddedBroker
from worker.models import ModelRegistry
from worker.ops.metrics import WorkerMetrics
from worker.scheduling.controller import Policy
from worker.scheduling.lanes import Lanes
from worker.settings import WorkerSettings


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


async def run_until(worker: Worker, stop: asyncio.Event) -> None:
    """Serve until ``stop`` is set, then drain and shut down; a stage's failure is
    raised here after the shutdown."""
    try:
        await worker.start()
    except BaseException:
        await worker.stop(drain=False)  # close what the failed start opened (clients, port)
        raise
    waiter = asyncio.create_task(stop.wait())
    serving = asyncio.create_task(worker.wait())
    try:
        await asyncio.wait({waiter, serving}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        await worker.stop(drain=not serving.done())
    if serving.done() and not serving.cancelled():
        serving.result()


async def serve(
    settings: WorkerSettings,
    registry: ModelRegistry,
    *,
    stop: asyncio.Event | None = None,
    metrics: WorkerMetrics | None = None,
    lanes: Lanes | None = None,
    policy: Policy | None = None,
) -> None:
    """Run until SIGINT/SIGTERM (or ``stop``), then drain and exit cleanly. ``lanes``
    and ``policy``: a benchmark's baselines (``Worker``)."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        worker = Worker(settings, registry, metrics=metrics, lanes=lanes, policy=policy)
        await run_until(worker, stop)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
