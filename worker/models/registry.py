"""The model registry: names to specs and adapters; models loaded lazily, once."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import torch

from consumers.errors import UnknownModel
from worker.models.adapters import Adapter
from worker.models.loaders import load_model
from worker.models.model import LoadedModel
from worker.models.specs import ModelSpec, RegistryFile

Loader = Callable[[ModelSpec, torch.device, Adapter], LoadedModel]


class ModelRegistry:
    """Thread-safe lookup; ``get`` loads a model on first use and caches it.

    Loading (``loader``) is kept apart from caching so that a tiered store can take over
    the cache without touching how weights are read.
    """

    def __init__(
        self,
        specs: list[ModelSpec],
        *,
        device: torch.device | None = None,
        loader: Loader = load_model,
    ) -> None:
        self._specs = {spec.name: spec for spec in specs}
        self._device = device or torch.device("cpu")
        self._loader = loader
        self._adapters: dict[str, Adapter] = {}
        self._models: dict[str, LoadedModel] = {}
        # One lock per model: loading a big model never blocks lookups of loaded ones.
        self._locks = {name: threading.Lock() for name in self._specs}

    @classmethod
    def from_toml(cls, path: Path, *, device: torch.device | None = None) -> ModelRegistry:
        return cls(RegistryFile.from_toml(path).models, device=device)

    def names(self) -> list[str]:
        return sorted(self._specs)

    def spec(self, name: str) -> ModelSpec:
        try:
            return self._specs[name]
        except KeyError:
            known = ", ".join(self.names()) or "none"
            raise UnknownModel(f"unknown model {name!r:.80}; known models: {known}") from None

    def adapter(self, name: str) -> Adapter:
        """The model's adapter, without loading its weights (for the ingest path)."""
        adapter = self._adapters.get(name)
        if adapter is None:
            spec = self.spec(name)
            with self._locks[name]:
                adapter = self._adapters.get(name) or spec.adapter.build()
                self._adapters[name] = adapter
        return adapter

    def get(self, name: str) -> LoadedModel:
        model = self._models.get(name)
        if model is None:
            spec, adapter = self.spec(name), self.adapter(name)
            with self._locks[name]:
                model = self._models.get(name) or self._loader(spec, self._device, adapter)
                self._models[name] = model
        return model

    def warmup(self, name: str, batch_size: int = 1) -> None:
        """Run one dummy batch so the first real one does not pay for lazy init."""
        model = self.get(name)
        item = model.adapter.prepare(model.adapter.example())
        model.run([item] * min(batch_size, model.max_batch))
