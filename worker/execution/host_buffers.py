"""Reused host buffers that a batch's inputs pass through on their way to a CUDA device.

A host-to-device copy runs asynchronously (``non_blocking=True``) only from page-locked
(pinned) host memory, and pinning memory is slow (``cudaHostAlloc``), so a launcher keeps
its buffers from batch to batch and grows one only when a batch needs more. The owner
must not stage again until the device has finished copying out of the buffers (the CUDA
backend waits on the copy's event).
"""

from __future__ import annotations

from typing import Any

import torch


class HostBuffers:
    """One flat byte buffer per input name (``None``: a batch that is a lone tensor);
    ``pin`` page-locks them (needs CUDA)."""

    def __init__(self, *, pin: bool) -> None:
        self._pin = pin
        self._buffers: dict[str | None, torch.Tensor] = {}

    def stage(self, batch: Any) -> Any:
        """``batch`` (a tensor, or a dict of them) copied into the buffers: views with the
        same shapes and dtypes. Anything that is not a CPU tensor passes through."""
        if isinstance(batch, dict):
            return {key: self._stage(key, value) for key, value in batch.items()}
        return self._stage(None, batch)

    def held(self) -> list[torch.Tensor]:
        """The buffers held now, as flat byte tensors."""
        return list(self._buffers.values())

    def _stage(self, key: str | None, value: Any) -> Any:
        if not isinstance(value, torch.Tensor) or value.device.type != "cpu":
            return value
        nbytes = value.numel() * value.element_size()
        buffer = self._buffers.get(key)
        if buffer is None or buffer.numel() < nbytes:
            # Doubling: a run of growing batches pins memory a logarithmic number of times.
            size = max(nbytes, 2 * buffer.numel() if buffer is not None else 0)
            buffer = torch.empty(size, dtype=torch.uint8, pin_memory=self._pin)
            self._buffers[key] = buffer
        staged = buffer[:nbytes].view(value.dtype).view(value.shape)
        staged.copy_(value)
        return staged
