"""One loader per weights format; each returns a callable module on the CPU, in eval mode.

Nothing here unpickles: export programs and TorchScript have their own formats, factory
weights are safetensors, and Hugging Face directories must hold safetensors weights.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn

from worker.models.adapters import Adapter
from worker.models.model import LoadedModel
from worker.models.specs import ModelSpec


def load_export(spec: ModelSpec) -> Callable[..., Any]:
    # Exported modules are already inference graphs; they refuse .eval().
    return torch.export.load(spec.path).module()


def load_torchscript(spec: ModelSpec) -> Callable[..., Any]:
    return torch.jit.load(str(spec.path), map_location="cpu").eval()


def load_factory(spec: ModelSpec) -> Callable[..., Any]:
    assert spec.factory is not None  # the spec validator guarantees it
    module_name, _, attr = spec.factory.partition(":")
    build = getattr(importlib.import_module(module_name), attr)
    module = build()
    if not isinstance(module, nn.Module):
        raise TypeError(f"{spec.factory} returned {type(module).__name__}, not an nn.Module")
    module.load_state_dict(load_file(spec.path), strict=True)
    return module.eval()


class MeanPooledEncoder(nn.Module):
    """A transformer encoder as a sentence embedder: masked mean of tokens, L2-normalized."""

    def __init__(self, encoder: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        hidden = self.encoder(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
        return F.normalize(pooled, p=2, dim=1)


def load_hf(spec: ModelSpec) -> Callable[..., Any]:
    from transformers import AutoModel  # slow to import; only hf models need it

    encoder = AutoModel.from_pretrained(spec.path, local_files_only=True, use_safetensors=True)
    return MeanPooledEncoder(encoder).eval()


LOADERS: dict[str, Callable[[ModelSpec], Callable[..., Any]]] = {
    "export": load_export,
    "torchscript": load_torchscript,
    "factory": load_factory,
    "hf": load_hf,
}


def load_model(spec: ModelSpec, device: torch.device, adapter: Adapter) -> LoadedModel:
    """Load ``spec``'s weights onto ``device``; ``adapter`` is ``spec.adapter.build()``."""
    module = LOADERS[spec.format](spec)
    if isinstance(module, nn.Module):
        module = module.to(device)
    return LoadedModel(
        name=spec.name,
        version=spec.version,
        module=module,
        adapter=adapter,
        max_batch=spec.max_batch,
        device=device,
    )
