"""A loaded model: its callable, its adapter, and the one place a batch is run."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from pydantic import JsonValue

from consumers.errors import ModelFailed
from worker.models.adapters import Adapter
from worker.models.measure import tensor_bytes


class Lease:
    """Counts forward passes in progress, so an evicted module is moved or freed only
    when no batch is running on it."""

    def __init__(self) -> None:
        self._idle = threading.Condition()
        self._active = 0
        self._on_idle: Callable[[], None] | None = None

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        with self._idle:
            self._active += 1
        try:
            yield
        finally:
            free = None
            with self._idle:
                self._active -= 1
                if not self._active:
                    free, self._on_idle = self._on_idle, None
                    self._idle.notify_all()
            if free is not None:
                free()

    def release(self, free: Callable[[], None]) -> None:
        """Call ``free`` now, or when the last forward pass in progress ends."""
        with self._idle:
            if self._active:
                self._on_idle = free
                return
        free()

    def wait_idle(self) -> None:
        """Until no forward pass runs (the compute thread never waits on the loader)."""
        with self._idle:
            self._idle.wait_for(lambda: not self._active)


@dataclass
class LoadedModel:
    """A model ready to run on ``device``; ``run`` is safe to call from worker threads."""

    name: str
    version: str
    module: Callable[..., Any]
    adapter: Adapter
    max_batch: int
    device: torch.device
    # Shared by every wrapper of the same module (dataclasses.replace copies it).
    lease: Lease = field(default_factory=lambda: Lease())

    def run(self, items: Sequence[Any]) -> list[JsonValue]:
        """Prepared items in, one output per item out (same order)."""
        if not items:
            return []
        return self.split(self.forward(items), len(items))

    def split(self, output: Any, n: int) -> list[JsonValue]:
        """The module's output for a batch of ``n`` items, as one output per item."""
        results = self.adapter.split(output, n)
        if len(results) != n:
            raise ModelFailed(f"{self.name}: {len(results)} outputs for {n} inputs")
        return results

    def forward(self, items: Sequence[Any]) -> Any:
        """The module's raw output for a batch of prepared items."""
        return self.forward_collated(self.adapter.collate(items))

    def forward_collated(self, batch: Any) -> Any:
        """The module's raw output for a batch already collated (a tensor, or a dict of
        them), held under the run lease so the store never frees it mid-pass."""
        batch = to_device(batch, self.device)
        with self.lease.held(), torch.inference_mode():
            return self.apply(batch)

    def apply(self, batch: Any) -> Any:
        """The module on a collated batch already on its device (the caller holds the
        lease and inference mode)."""
        return self.module(**batch) if isinstance(batch, dict) else self.module(batch)

    @property
    def nbytes(self) -> int:
        """Bytes of the tensors the module holds (the weights part of its store charge)."""
        return tensor_bytes(self.module)


def to_device(batch: Any, device: torch.device) -> Any:
    """A collated batch (a tensor, or a dict of them) copied to ``device``; the copies
    are asynchronous when the source is pinned host memory."""
    if isinstance(batch, dict):
        return {key: value.to(device, non_blocking=True) for key, value in batch.items()}
    return batch.to(device, non_blocking=True)
