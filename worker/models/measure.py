"""Measuring what a model really holds: its tensors' bytes, process RSS, and freeing.

Charges are measured, not declared: the bytes of every distinct tensor storage the
module reaches (parameters, buffers, constants), plus the workspace its warm-up grew
(the CUDA allocator's peak, or the process RSS on a CPU-only machine).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
from collections.abc import Callable
from typing import Any

import torch

_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    """Resident set size of this process, from /proc (no psutil call on the hot path)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * _PAGE_BYTES


def tensor_bytes(module: Any) -> int:
    """Bytes of the distinct storages ``module`` holds (shared weights count once)."""
    seen: dict[int, int] = {}
    for tensor in _tensors(module):
        storage = tensor.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def _tensors(module: Any) -> list[torch.Tensor]:
    if isinstance(module, torch.nn.Module):
        found = [*module.parameters(), *module.buffers()]
        # Exported and compiled graphs keep constants as plain tensor attributes.
        for sub in module.modules():
            found += [v for v in vars(sub).values() if isinstance(v, torch.Tensor)]
        return found
    return [v for v in vars(module).values() if isinstance(v, torch.Tensor)]


def workspace_bytes(device: torch.device, warm_up: Callable[[], None]) -> int:
    """Run ``warm_up`` and return the memory it grew: allocator peak on CUDA, RSS on CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        warm_up()
        torch.cuda.synchronize(device)
        return max(0, torch.cuda.max_memory_allocated(device) - before)
    before = rss_bytes()
    warm_up()
    return max(0, rss_bytes() - before)


def release_memory(frozen_since_load: bool) -> None:
    """Give freed model memory back: collect its reference cycles, return the heap.

    Exported graphs hold reference cycles. When ``gc.freeze()`` ran after the model
    loaded (the worker freezes after start-up), its objects sit in the permanent
    generation where no collection looks: unfreeze, collect, freeze again.
    """
    if frozen_since_load:
        gc.unfreeze()
        gc.collect()
        gc.freeze()
    else:
        gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
