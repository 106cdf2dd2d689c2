"""One loader per weights format; each returns a callable module on the CPU, in eval mode.

Nothing here unpickles: export programs and TorchScript have their own formats, factory
weights are safetensors, and Hugging Face directories must hold safetensors weights.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from collections.abc import Callable
from importlib.machinery import PathFinder
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn

from worker.models.adapters import Adapter
from worker.models.generative import GenerativeAdapter
from worker.models.model import LoadedModel
from worker.models.specs import ModelSpec, refuse_world_writable

# Modules imported from a registry's folder enter sys.modules one at a time.
_IMPORT_LOCK = threading.Lock()
# torch.export.load keeps its deserializer in a process global: two loads at once (two
# registries' loader threads, as two workers in one process have) fail an assertion.
_EXPORT_LOAD_LOCK = threading.Lock()


def load_export(spec: ModelSpec) -> Callable[..., Any]:
    with _EXPORT_LOAD_LOCK:
        program = torch.export.load(spec.path)
    check_batch_dimension(program, spec)
    # Exported modules are already inference graphs; they refuse .eval().
    return program.module()


def check_batch_dimension(program: torch.export.ExportedProgram, spec: ModelSpec) -> None:
    """Refuse a program that cannot take every batch the worker sends (1 to
    ``max_batch`` items): an export specializes each dimension not declared dynamic to
    its example's size, and a batch of any other size fails its guard."""
    fix = "export it with dynamic_shapes={%r: {0: torch.export.Dim('batch')}} (docs/MODELS.md)"
    inputs = set(program.graph_signature.user_inputs)
    for node in program.graph.nodes:
        value = node.meta.get("val")
        if node.op != "placeholder" or node.name not in inputs:
            continue
        if not isinstance(value, torch.Tensor) or value.ndim == 0:
            continue
        size = value.shape[0]
        where = f"model {spec.name!r} ({spec.path}): input {node.name!r}"
        if isinstance(size, int):
            if size == 1 == spec.max_batch:
                continue
            alone = " or set max_batch = 1" if size == 1 else ""
            raise ValueError(
                f"{where} has a fixed batch size of {size}, but the worker sends batches "
                f"of 1 to max_batch ({spec.max_batch}) items; " + fix % node.name + alone
            )
        bounds = program.range_constraints.get(size.node.expr)
        if bounds is None:
            continue
        if bool(bounds.lower > 1):
            raise ValueError(
                f"{where} takes batches of at least {bounds.lower} items, but the worker "
                "sends batches of 1; " + fix % node.name
            )
        if bool(bounds.upper < spec.max_batch):
            raise ValueError(
                f"{where} takes batches of at most {bounds.upper} items, below max_batch "
                f"({spec.max_batch}); set max_batch = {bounds.upper} or " + fix % node.name
            )


def load_torchscript(spec: ModelSpec) -> Callable[..., Any]:
    return torch.jit.load(str(spec.path), map_location="cpu").eval()


def load_factory(spec: ModelSpec) -> Callable[..., Any]:
    assert spec.factory is not None  # the spec validator guarantees it
    module_name, _, attr = spec.factory.partition(":")
    build = getattr(factory_module(module_name, spec.folder), attr, None)
    if not callable(build):
        raise ImportError(f"factory {spec.factory}: module {module_name} has no function {attr}")
    module = build()
    if not isinstance(module, nn.Module):
        raise TypeError(f"{spec.factory} returned {type(module).__name__}, not an nn.Module")
    module.load_state_dict(load_file(spec.path), strict=True)
    return module.eval()


def factory_module(name: str, folder: Path | None) -> ModuleType:
    """Module ``name``, from the registry's ``folder`` when it is there (as Python
    imports a module beside the script it runs), else from the installed packages and
    PYTHONPATH. A module read from the folder is refused if every user could rewrite it,
    like the registry itself."""
    top = name.partition(".")[0]
    found = PathFinder.find_spec(top, [str(folder)]) if folder is not None else None
    if found is None or found.origin is None or found.loader is None:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is None or not name.startswith(exc.name):
                raise  # the module itself imports something missing
            beside = f"in {folder}, the registry's folder, nor " if folder else ""
            raise ModuleNotFoundError(
                f"factory module {name!r} is neither {beside}importable "
                "(installed, or on PYTHONPATH)",
                name=name,
            ) from exc
    with _IMPORT_LOCK:
        loaded = sys.modules.get(top)
        if loaded is None:
            refuse_world_writable(Path(found.origin), "the factory module")
            loaded = importlib.util.module_from_spec(found)
            sys.modules[top] = loaded
            try:
                found.loader.exec_module(loaded)
            except BaseException:
                del sys.modules[top]
                raise
        elif getattr(loaded, "__file__", None) != found.origin:
            raise ImportError(
                f"factory module {top!r} is in {folder}, but a module of that name is "
                f"already imported from {getattr(loaded, '__file__', None)}: rename yours"
            )
        if name != top:
            inner = importlib.util.find_spec(name)
            if inner is not None and inner.origin is not None:
                refuse_world_writable(Path(inner.origin), "the factory module")
        return importlib.import_module(name)


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
    if isinstance(adapter, GenerativeAdapter):
        from worker.models.generative_model import load_generative  # imports transformers

        return load_generative(spec, device, adapter)
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
