"""The model registry: names to specs and adapters, and the tiered store of loaded models.

Candidate versions (``[[candidates]]``) live beside the models under the key
``name@version``: a rollout routes requests to that key, and the store loads, places
and evicts a candidate like any model.

The registry file may change while the worker runs: ``reload`` (called by the file
watcher) adds, removes and replaces models without a restart. A removed model keeps
answering ``spec`` and ``adapter`` for the requests already queued, whose batches then
fail with ``unknown_model``; batches already running finish on the version they
started with, and each result carries the version that computed it.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import torch
from prometheus_client import CollectorRegistry
from pydantic import JsonValue

from consumers.errors import ModelUnavailable, UnknownModel
from worker.base.backoff import Failure
from worker.models.adapters import Adapter
from worker.models.loaders import load_model
from worker.models.model import LoadedModel
from worker.models.samples import InputSamples
from worker.models.specs import CandidateSpec, ModelSpec, RegistryFile, candidate_key
from worker.models.store import Loader, Placement, TieredStore
from worker.models.store_metrics import StoreMetrics
from worker.models.watch import FileWatcher
from worker.settings import ModelStoreConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Changes:
    added: list[str]
    removed: list[str]
    replaced: list[str]


class ModelRegistry:
    """Thread-safe lookups; ``get`` and ``ensure`` place models through the tiered store.

    Loading (``loader``) is kept apart from placement, so tests and tools can swap how
    weights are read without touching the tiers.
    """

    def __init__(
        self,
        specs: list[ModelSpec],
        *,
        device: torch.device | None = None,
        loader: Loader = load_model,
        config: ModelStoreConfig | None = None,
        path: Path | None = None,
        candidates: list[CandidateSpec] | None = None,
    ) -> None:
        self.path = path
        self.device = device or torch.device("cpu")  # where models run
        self._specs = _keyed(specs, candidates or [])
        self._retired: dict[str, ModelSpec] = {}
        self._adapters: dict[str, Adapter] = {}
        self._adapter_failures: dict[str, Failure] = {}
        self._lock = threading.Lock()
        self._config = config or ModelStoreConfig()
        self._collector: CollectorRegistry | None = None
        self._metrics = StoreMetrics()
        self._samples = InputSamples()
        self._store = TieredStore(
            self._loadable,
            device=self.device,
            loader=loader,
            config=self._config,
            metrics=self._metrics,
            samples=self._samples,
        )
        self._watcher: FileWatcher | None = None

    @classmethod
    def from_toml(
        cls,
        path: Path,
        *,
        device: torch.device | None = None,
        loader: Loader = load_model,
        config: ModelStoreConfig | None = None,
    ) -> ModelRegistry:
        file = RegistryFile.from_toml(path)
        return cls(
            file.models,
            device=device,
            loader=loader,
            config=config,
            path=path,
            candidates=file.candidates,
        )

    def configure(self, config: ModelStoreConfig, collector: CollectorRegistry) -> None:
        """Budgets and metrics of the worker that serves from this registry."""
        if collector is not self._collector:
            self._collector, self._metrics = collector, StoreMetrics(collector)
        self._config = config
        self._store.configure(config, self._metrics)

    # -- lookups -----------------------------------------------------------------------

    def names(self) -> list[str]:
        """The models requests may name (candidates are reached through rollouts)."""
        return sorted(n for n, s in self._specs.items() if not isinstance(s, CandidateSpec))

    def knows(self, name: str) -> bool:
        """Whether ``name`` is one of ``names()`` (a dict lookup, for any thread)."""
        spec = self._specs.get(name)
        return spec is not None and not isinstance(spec, CandidateSpec)

    def candidates(self) -> dict[str, CandidateSpec]:
        """The candidate versions, by their key (``name@version``)."""
        return {k: s for k, s in self._specs.items() if isinstance(s, CandidateSpec)}

    def spec(self, name: str) -> ModelSpec:
        spec = self._specs.get(name) or self._retired.get(name)
        if spec is None:
            known = ", ".join(self.names()) or "none"
            raise UnknownModel(f"unknown model {name!r:.80}; known models: {known}")
        return spec

    def adapter(self, name: str) -> Adapter:
        """The model's adapter, without loading its weights (for the ingest path).

        An adapter that cannot be built (a missing tokenizer, say) raises
        ``ModelUnavailable``, and is tried again only after a backoff.
        """
        adapter = self._adapters.get(name)
        if adapter is not None:
            return adapter
        spec = self.spec(name)
        with self._lock:
            adapter = self._adapters.get(name)
            if adapter is not None:
                return adapter
            failure = self._adapter_failures.get(name)
            if failure is not None and not failure.due:
                raise ModelUnavailable(failure.message)
            try:
                adapter = self._adapters[name] = spec.adapter.build()
            except Exception as exc:
                raise ModelUnavailable(self._adapter_failed(name, failure, exc)) from exc
            self._adapter_failures.pop(name, None)
        return adapter

    def adapters_built(self) -> bool:
        """Whether every model's and candidate's adapter is built, so that no lookup
        builds one (a tokenizer load can take a second)."""
        return self._adapters.keys() >= self._specs.keys()

    def _adapter_failed(self, name: str, previous: Failure | None, exc: Exception) -> str:
        what = f"model {name!r}: its adapter cannot be built"
        failure = self._adapter_failures[name] = Failure.after(
            previous, what, exc, self._config.backoff
        )
        log.warning("%s", failure.message)
        return failure.message

    def ensure(self, name: str) -> Future[LoadedModel]:
        """The model on the device: done when it is there, else its single-flight load."""
        return self._store.ensure(name)

    def reserve(self, name: str, extra_bytes: int) -> None:
        """Charge ``extra_bytes`` more to ``name`` on the device tier (see the store's
        ``reserve``); waits until room is made."""
        self._store.reserve(name, extra_bytes).result()

    def get(self, name: str) -> LoadedModel:
        """The model on the device, loaded if needed (the executor's ``resolve``)."""
        return self._store.get(name)

    def warmup(self, name: str, batch_size: int = 1) -> None:
        """Run one dummy batch so the first real one does not pay for lazy init."""
        model = self.get(name)
        item = model.adapter.prepare(model.adapter.example())
        model.run([item] * min(batch_size, model.max_batch))

    def warm_every(self) -> None:
        """Load and warm every model; one that fails is logged, and its requests fail
        as model_error while the others serve."""
        for name in self.names():
            try:
                self.warmup(name)
            except Exception:
                log.exception("model %r failed to load or warm up", name)

    def record_input(self, name: str, inputs: JsonValue) -> None:
        """A served request's inputs: a later load checks an optimization on them too."""
        self._samples.record(name, inputs)

    def on_device(self, name: str) -> bool:
        """Whether ``name`` is loaded and warm on the device tier (a batch runs at once)."""
        return self._store.on_device(name)

    def placements(self) -> dict[str, Placement]:
        """Models on the device or the host tier; the others are on disk."""
        return self._store.placements()

    def _loadable(self, name: str) -> tuple[ModelSpec, Adapter]:
        if name in self._retired:
            raise UnknownModel(f"model {name!r:.80} was removed from the registry")
        return self.spec(name), self.adapter(name)

    # -- changes while running ---------------------------------------------------------

    def watch(self) -> None:
        """Reload whenever the registry file changes (polled; no-op without a file)."""
        interval = self._config.watch_interval_s
        if self.path is not None and interval > 0 and self._watcher is None:
            self._watcher = FileWatcher(self.path, interval, self._reload_logged)

    def reload(self) -> Changes:
        """Apply the registry file as it is now; raises (keeping the old one) if invalid."""
        if self.path is None:
            raise ValueError("this registry was not read from a file")
        file = RegistryFile.from_toml(self.path)
        new = _keyed(file.models, file.candidates)
        with self._lock:
            old = self._specs
            changes = Changes(
                added=sorted(new.keys() - old.keys()),
                removed=sorted(old.keys() - new.keys()),
                replaced=sorted(n for n in new.keys() & old.keys() if new[n] != old[n]),
            )
            self._specs = new
            for name in changes.removed:
                self._retired[name] = old[name]
            for name in (*changes.added, *changes.replaced):
                self._retired.pop(name, None)
            for name in (*changes.removed, *changes.replaced):
                self._adapters.pop(name, None)
                self._adapter_failures.pop(name, None)
        forgotten = [self._store.forget(n) for n in (*changes.removed, *changes.replaced)]
        for done in forgotten:
            done.result()
        return changes

    def _reload_logged(self) -> None:
        try:
            changes = self.reload()
        except Exception as exc:
            self._metrics.reloads.labels("error").inc()
            log.error("registry %s not reloaded, the previous one serves: %s", self.path, exc)
            return
        self._metrics.reloads.labels("ok").inc()
        log.info(
            "registry reloaded: added %s, removed %s, replaced %s",
            changes.added,
            changes.removed,
            changes.replaced,
        )

    def close(self) -> None:
        """Stop watching and loading; the registry can serve again later."""
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None
        self._store.close()


def _keyed(models: list[ModelSpec], candidates: list[CandidateSpec]) -> dict[str, ModelSpec]:
    specs = {spec.name: spec for spec in models}
    specs.update({candidate_key(c.name, c.version): c for c in candidates})
    return specs
