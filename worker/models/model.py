"""A loaded model: its callable, its adapter, and the one place a batch is run."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from pydantic import JsonValue

from consumers.errors import ModelFailed
from worker.models.adapters import Adapter


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
        batch = _to_device(self.adapter.collate(items), self.device)
        with torch.inference_mode():
            output = self.module(**batch) if isinstance(batch, dict) else self.module(batch)
        results = self.adapter.split(output, len(items))
        if len(results) != len(items):
            raise ModelFailed(f"{self.name}: {len(results)} outputs for {len(items)} inputs")
        return results

    @property
    def nbytes(self) -> int:
        """Bytes held by parameters and buffers: what the model store budgets for."""
        if not isinstance(self.module, torch.nn.Module):
            return 0
        tensors = itertools.chain(self.module.parameters(), self.module.buffers())
        return sum(t.numel() * t.element_size() for t in tensors)


def _to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, dict):
        return {key: value.to(device, non_blocking=True) for key, value in batch.items()}
    return batch.to(device, non_blocking=True)
