"""Models: registry file, loaders per weights format, adapters, the tiered store.

Names load on first use (PEP 562): most of them import torch, which command-line
paths such as ``inferlane drift`` or ``inferlane --help`` never need.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from worker.models.adapters import (
        Adapter,
        ClassifierAdapter,
        RegressorAdapter,
        TextEmbeddingAdapter,
    )
    from worker.models.loaders import MeanPooledEncoder, load_model
    from worker.models.model import LoadedModel
    from worker.models.registry import Changes, ModelRegistry
    from worker.models.specs import (
        AdapterConfig,
        CandidateSpec,
        ClassifierConfig,
        ModelSpec,
        RegistryFile,
        RegressorConfig,
        TextEmbeddingConfig,
        candidate_key,
    )

_HOME = {
    "Adapter": "worker.models.adapters",
    "AdapterConfig": "worker.models.specs",
    "CandidateSpec": "worker.models.specs",
    "Changes": "worker.models.registry",
    "ClassifierAdapter": "worker.models.adapters",
    "ClassifierConfig": "worker.models.specs",
    "LoadedModel": "worker.models.model",
    "MeanPooledEncoder": "worker.models.loaders",
    "ModelRegistry": "worker.models.registry",
    "ModelSpec": "worker.models.specs",
    "RegistryFile": "worker.models.specs",
    "RegressorAdapter": "worker.models.adapters",
    "RegressorConfig": "worker.models.specs",
    "TextEmbeddingAdapter": "worker.models.adapters",
    "TextEmbeddingConfig": "worker.models.specs",
    "candidate_key": "worker.models.specs",
    "load_model": "worker.models.loaders",
}

__all__ = [
    "Adapter",
    "AdapterConfig",
    "CandidateSpec",
    "Changes",
    "ClassifierAdapter",
    "ClassifierConfig",
    "LoadedModel",
    "MeanPooledEncoder",
    "ModelRegistry",
    "ModelSpec",
    "RegistryFile",
    "RegressorAdapter",
    "RegressorConfig",
    "TextEmbeddingAdapter",
    "TextEmbeddingConfig",
    "candidate_key",
    "load_model",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # once is enough
    return value
