"""A loaded model: its callable, its adapter, and the one place a batch is run."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from pydantic import JsonValue

from consumers.errors import ModelFailed
from worker.models.adapters import Adapter
from worker.models.measure import tensor_bytes


@dataclass
class LoadedModel:
    """A model ready to run on ``device``; ``run`` is safe to call from worker threads."""

    name: str
    version: str
    module: Callable[..., Any]
    adapter: Adapter
    max_batch: int
    device: torch.device

    def run(self, items: Sequence[Any]) -> list[JsonValue]:
        """Prepared items in, one output per item out (same order)."""
        if not items:
            return []
        results = self.adapter.split(self.forward(items), len(items))
        if len(results) != len(items):
            raise ModelFailed(f"{self.name}: {len(results)} outputs for {len(items)} inputs")
        return results

    def forward(self, items: Sequence[Any]) -> Any:
        """The module's raw output for a batch of prepared items."""
        batch = _to_device(self.adapter.collate(items), self.device)
        with torch.inference_mode():
            return self.module(**batch) if isinstance(batch, dict) else self.module(batch)

    @property
    def nbytes(self) -> int:
        """Bytes of the tensors the module holds (the weights part of its store charge)."""
        return tensor_bytes(self.module)


def _to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, dict):
        return {key: value.to(device, non_blocking=True) for key, value in batch.items()}
    return batch.to(device, non_blocking=True)
