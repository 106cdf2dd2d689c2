"""The tiered model store: acts on the decider's moves, loads each model once at a time.

Every load, promotion and eviction runs on one loader thread, so placement changes are
serialized and never run on the event loop or the compute thread; lookups of models on
the device take a lock for a few microseconds. ``ensure`` is single flight: however many
batches want a cold model, one load runs and every one of them gets its future.

A model that fails to load answers ``ModelUnavailable`` until its backoff passes, and is
retried in the background meanwhile; the other models are not affected.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import torch

from consumers.errors import ModelUnavailable, UnknownModel
from worker.base.backoff import Failure
from worker.base.blocking import one_thread_pool
from worker.models.adapters import Adapter
from worker.models.measure import (
    code_cache_keys,
    forget_load_caches,
    free_tensors,
    return_heap,
    tensor_bytes,
    workspace_bytes,
)
from worker.models.model import LoadedModel
from worker.models.optimize import guarded
from worker.models.samples import InputSamples
from worker.models.specs import ModelSpec
from worker.models.store_metrics import StoreMetrics
from worker.models.tiers import (
    Budgets,
    Move,
    Resident,
    Tier,
    View,
    apply,
    fit,
    plan_park,
    plan_use,
    touch,
)
from worker.settings import ModelStoreConfig

log = logging.getLogger(__name__)

Loader = Callable[[ModelSpec, torch.device, Adapter], LoadedModel]
SpecOf = Callable[[str], tuple[ModelSpec, Adapter]]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Placement:
    """One model's place, for ``inferlane models list`` and the status page."""

    tier: Tier
    device_bytes: int
    host_bytes: int
    last_used_s: float | None  # wall clock


class TieredStore:
    def __init__(
        self,
        spec_of: SpecOf,
        *,
        device: torch.device,
        loader: Loader,
        config: ModelStoreConfig,
        metrics: StoreMetrics,
        samples: InputSamples | None = None,
    ) -> None:
        self._spec_of = spec_of  # raises UnknownModel, or ModelUnavailable (adapter)
        self._samples = samples or InputSamples()  # real inputs for guarded optimization
        self._device_type = device
        self._loader = loader
        self.configure(config, metrics)
        self._lock = threading.Lock()
        self._view = View()
        self._device: dict[str, LoadedModel] = {}
        self._host: dict[str, LoadedModel] = {}  # on CUDA: modules on the CPU, pinned
        self._charges: dict[str, Resident] = {}  # last measured, the next load's estimate
        self._code_keys: dict[str, set[str]] = {}  # generated sources its load cached
        self._last_used: dict[str, float] = {}
        self._loading: dict[str, Future[LoadedModel]] = {}
        self._failures: dict[str, Failure] = {}
        self._timers: dict[str, threading.Timer] = {}
        self._pool: ThreadPoolExecutor | None = None

    def configure(self, config: ModelStoreConfig, metrics: StoreMetrics) -> None:
        self._config = config
        self._budgets = Budgets(config.device_bytes, config.host_bytes)
        self._metrics = metrics
        budgets = {Tier.DEVICE: config.device_bytes, Tier.HOST: config.host_bytes}
        metrics.occupancy({}, budgets)

    # -- lookups (any thread) ----------------------------------------------------------

    def ensure(self, name: str) -> Future[LoadedModel]:
        """The model on the device: a done future when it is there, else its one load."""
        with self._lock:
            model = self._device.get(name)
            if model is not None:
                self._view = touch(self._view, name)
                self._last_used[name] = time.time()
                self._metrics.hits.labels(Tier.DEVICE.value).inc()
                return _done(model)
            failure = self._failures.get(name)
            if failure is not None and not failure.due:
                return _failed(ModelUnavailable(failure.message))
            loading = self._loading.get(name)
            if loading is not None:
                return loading
            loading = self._loading[name] = Future()
        self._submit(self._load_job, name, loading)
        return loading

    def get(self, name: str) -> LoadedModel:
        """The model on the device, loading it (once, on the loader thread) if needed."""
        model = self._device.get(name)
        return model if model is not None else self.ensure(name).result()

    def on_device(self, name: str) -> bool:
        # The view is an immutable snapshot, replaced whole: no lock needed to read it.
        return self._view.tier_of(name) is Tier.DEVICE

    def placements(self) -> dict[str, Placement]:
        with self._lock:
            placed = {}
            for tier, residents in ((Tier.DEVICE, self._view.device), (Tier.HOST, self._view.host)):
                for r in residents:
                    used = self._last_used.get(r.name)
                    placed[r.name] = Placement(tier, r.device_bytes, r.host_bytes, used)
            return placed

    # -- changes (on the loader thread) ------------------------------------------------

    def reserve(self, name: str, extra_bytes: int) -> Future[None]:
        """Charge ``extra_bytes`` more on the device to ``name`` (memory its executor
        holds for it: a generative model's KV cache, measured by the caller), and make
        room for them as a load does. Kept as the model's charge until it is unloaded."""
        done: Future[None] = Future()
        self._submit(functools.partial(self._reserve_job, extra_bytes=extra_bytes), name, done)
        return done

    def forget(self, name: str) -> Future[None]:
        """Free ``name`` from every tier (removed or replaced in the registry); batches
        already running keep their reference and finish on the version they started."""
        done: Future[None] = Future()
        self._submit(self._forget_job, name, done)
        return done

    def close(self) -> None:
        """Stop retries and the loader thread (a later ``ensure`` starts a new one)."""
        with self._lock:
            timers, self._timers = list(self._timers.values()), {}
            pool, self._pool = self._pool, None
        for timer in timers:
            timer.cancel()
        if pool is not None:
            pool.shutdown(wait=True)

    def _submit(self, job: Callable[[str, Future[T]], None], name: str, done: Future[T]) -> None:
        with self._lock:
            if self._pool is None:
                self._pool = one_thread_pool("model-load")
            pool = self._pool
        pool.submit(job, name, done)

    def _load_job(self, name: str, done: Future[LoadedModel]) -> None:
        try:
            model = self._bring(name)
        except Exception as exc:
            error = exc if isinstance(exc, UnknownModel) else self._record_failure(name, exc)
            with self._lock:
                self._loading.pop(name, None)
            done.set_exception(error)
            return
        with self._lock:
            self._loading.pop(name, None)
        done.set_result(model)

    def _reserve_job(self, name: str, done: Future[None], *, extra_bytes: int) -> None:
        with self._lock:
            old = self._charges.get(name) or Resident(name, 0, 0)
            charge = Resident(name, old.device_bytes + extra_bytes, old.host_bytes)
            self._charges[name] = charge
            device = tuple(charge if r.name == name else r for r in self._view.device)
            self._view = View(device, self._view.host)
            self._place_gauges()
        for move in fit(self._view, self._budgets, keep=name):
            self._evict(move)
        done.set_result(None)

    def _forget_job(self, name: str, done: Future[None]) -> None:
        with self._lock:
            self._failures.pop(name, None)
            timer = self._timers.pop(name, None)
            tier = self._view.tier_of(name)
        if timer is not None:
            timer.cancel()
        if tier is not Tier.DISK:
            # Not freed by force: a batch may hold the old version; references decide.
            self._evict(Move(name, tier, Tier.DISK), free=False)
        self._charges.pop(name, None)
        with contextlib.suppress(KeyError):  # it never failed
            self._metrics.unavailable.remove(name)
        done.set_result(None)

    def _bring(self, name: str) -> LoadedModel:
        spec, adapter = self._spec_of(name)
        with self._lock:
            view = self._view
            self._last_used[name] = time.time()
        source = view.tier_of(name)
        if source is Tier.DEVICE:  # loaded by a job queued before this one
            return self._device[name]
        moves = plan_use(view, self._estimate(name, spec), self._budgets)
        for move in moves[:-1]:
            self._evict(move)
        if source is Tier.HOST:
            self._metrics.hits.labels(Tier.HOST.value).inc()
            model = self._timed(self._metrics.promotion, name, lambda: self._promote(name))
        else:
            self._metrics.misses.inc()
            model = self._timed(
                self._metrics.load, name, lambda: self._cold_load(name, spec, adapter)
            )
        # Measured now: if it takes more than estimated, make room after the fact.
        for move in fit(self._view, self._budgets, keep=name):
            self._evict(move)
        return model

    def _cold_load(self, name: str, spec: ModelSpec, adapter: Adapter) -> LoadedModel:
        cached = code_cache_keys()
        model = self._loader(spec, self._device_type, adapter)
        if spec.optimize is not None:
            model = guarded(model, spec, self._metrics, self._samples.of(name))
        weights = tensor_bytes(model.module)
        workspace = workspace_bytes(model.device, lambda: _warm(model))
        charge = Resident(name, weights + workspace, weights)
        with self._lock:
            self._charges[name] = charge
            self._code_keys[name] = code_cache_keys() - cached
            self._device[name] = model
            self._place(Move(name, Tier.DISK, Tier.DEVICE), charge)
        return model

    def _promote(self, name: str) -> LoadedModel:
        with self._lock:
            parked = self._host[name]
        model = parked
        if isinstance(parked.module, torch.nn.Module) and parked.device != self._device_type:
            module = parked.module.to(self._device_type, non_blocking=True)
            model = dataclasses.replace(parked, module=module, device=self._device_type)
            _warm(model)  # moved: the first batch on the device should not pay for set-up
        # Not moved (CPU only): the module is the one warmed at load, nothing to redo.
        with self._lock:
            del self._host[name]
            self._device[name] = model
            self._place(Move(name, Tier.HOST, Tier.DEVICE), self._charges[name])
        return model

    def _evict(self, move: Move, *, free: bool = True) -> None:
        started = time.perf_counter()
        with self._lock:
            model = self._device.pop(move.name, None) or self._host.pop(move.name, None)
            self._place(move, self._charges.get(move.name, Resident(move.name, 0, 0)))
        if move.target is Tier.HOST and model is not None:
            parked = _to_host(model)  # outside the lock: it may wait for a running batch
            with self._lock:
                self._host[move.name] = parked
        if move.target is Tier.DISK and model is not None and free:
            module = model.module
            model.lease.release(lambda: free_tensors(module))
            del model, module
            forget_load_caches(self._code_keys.pop(move.name, set()))
            return_heap()
        self._metrics.evictions.labels(move.source.value).inc()
        self._metrics.eviction.labels(move.name).observe(time.perf_counter() - started)

    def _place(self, move: Move, charge: Resident) -> None:
        """Record a move in the view and the gauges (the lock is held)."""
        self._view = apply(self._view, [move], charge)
        self._place_gauges()

    def _place_gauges(self) -> None:
        used = {
            Tier.DEVICE: sum(r.device_bytes for r in self._view.device),
            Tier.HOST: sum(r.host_bytes for r in self._view.host),
        }
        self._metrics.occupancy(used, {})

    def _estimate(self, name: str, spec: ModelSpec) -> Resident:
        """The last measured charge; before the first load, the files' size."""
        known = self._charges.get(name)
        if known is not None:
            return known
        path = spec.path
        files = path.rglob("*") if path.is_dir() else [path]
        size = sum(f.stat().st_size for f in files if f.is_file())
        return Resident(name, size, size)

    @staticmethod
    def _timed(histogram: object, name: str, action: Callable[[], T]) -> T:
        started = time.perf_counter()
        result = action()
        histogram.labels(name).observe(time.perf_counter() - started)  # type: ignore[attr-defined]
        return result

    # -- failures ----------------------------------------------------------------------

    def _record_failure(self, name: str, exc: Exception) -> ModelUnavailable:
        with self._lock:
            failure = Failure.after(
                self._failures.get(name),
                f"model {name!r} is unavailable",
                exc,
                self._config.backoff,
            )
            self._failures[name] = failure
            message = failure.message
            timer = threading.Timer(failure.delay_s, self._retry, [name])
            timer.daemon = True
            self._timers[name] = timer
        log.warning("%s", message)
        self._metrics.load_failures.labels(name).inc()
        self._metrics.unavailable.labels(name).set(1)
        timer.start()
        return ModelUnavailable(message)

    def _retry(self, name: str) -> None:
        with self._lock:
            if self._timers.pop(name, None) is None:  # closed or forgotten meanwhile
                return
        self._submit(self._retry_job, name, Future())

    def _retry_job(self, name: str, done: Future[None]) -> None:
        if name not in self._failures or self._view.tier_of(name) is not Tier.DISK:
            return
        try:
            spec, adapter = self._spec_of(name)
            model = self._loader(spec, self._device_type, adapter)
        except UnknownModel:
            return
        except Exception as exc:
            self._record_failure(name, exc)
            return
        log.info("model %r loads again", name)
        weights = tensor_bytes(model.module)
        charge = self._charges.get(name) or Resident(name, weights, weights)
        with self._lock:
            self._failures.pop(name, None)
            self._charges[name] = charge
            for move in plan_park(self._view, charge, self._budgets):
                self._host[name] = _to_host(model)
                self._place(move, charge)
        self._metrics.unavailable.labels(name).set(0)
        done.set_result(None)


def _warm(model: LoadedModel) -> None:
    model.run([model.adapter.prepare(model.adapter.example())])


def _to_host(model: LoadedModel) -> LoadedModel:
    """On CUDA, weights back to page-locked host memory (fast, async copies up again)."""
    if model.device.type != "cuda" or not isinstance(model.module, torch.nn.Module):
        return model  # on a CPU-only machine host and device are the same memory
    model.lease.wait_idle()  # the move is in place: no batch may be running on it
    module = model.module.to("cpu")
    for tensor in (*module.parameters(), *module.buffers()):
        tensor.data = tensor.data.pin_memory()
    return dataclasses.replace(model, module=module, device=torch.device("cpu"))


def _done(value: T) -> Future[T]:
    future: Future[T] = Future()
    future.set_result(value)
    return future


def _failed(error: Exception) -> Future[LoadedModel]:
    future: Future[LoadedModel] = Future()
    future.set_exception(error)
    return future
