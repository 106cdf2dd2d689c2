"""The model store's evidence: LRU accounting, promotion against cold load, RSS over swaps.

``python -m bench.model_store [--requests 400] [--swaps 1000]`` uses eight copies of
the digits classifier (``inferlane models build-demo DIR --copies 8``), with budgets
measured to hold two models on the device and three on the host, and reports:

- round-robin and Zipf (s=1.1) workloads: errors, and device hits, host hits, misses
  and evictions from the store's own Prometheus counters, beside what an LRU stack of
  depth 5 (2 device + 3 host, equal sizes) predicts, computed independently here;
- promotion from host against a cold load from disk of the same model (median), with
  the file in the page cache and after evicting it from the cache (posix_fadvise);
- process RSS after 10 and after ``--swaps`` swaps (device holds one model, host none:
  each swap loads from disk and frees the other).

Timings on a shared machine are noisy: read ratios, not absolute times. Where CUDA is
present it also reports pinned host→device copy bandwidth against pageable copies.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch
from prometheus_client import CollectorRegistry

from bench.measure import rss_bytes
from worker.demo.copies import COPY_PREFIX, write_copies
from worker.launch import tune_process
from worker.models import ModelRegistry
from worker.models.measure import tensor_bytes
from worker.settings import ModelStoreConfig, WorkerSettings

MODELS = 8


def _registry(path: Path, device_models: float, host_models: float, each: int) -> ModelRegistry:
    config = ModelStoreConfig(
        device_bytes=int(device_models * each),
        host_bytes=int(host_models * each),
        watch_interval_s=0,
    )
    registry = ModelRegistry.from_toml(path, config=config)
    registry.configure(config, CollectorRegistry())
    return registry


def _counter(registry: ModelRegistry, name: str, **labels: str) -> int:
    value = registry._metrics.registry.get_sample_value(name, labels)
    return int(value or 0)


def _lru_expectation(trace: list[str], device: int, host: int) -> dict[str, int]:
    """Exclusive two-level LRU with equal sizes: one recency stack, top ``device`` on
    the device and the next ``host`` on the host."""
    counts = {"device_hits": 0, "host_hits": 0, "misses": 0, "evictions": 0}
    stack: list[str] = []
    for name in trace:
        depth = stack.index(name) if name in stack else device + host
        if depth < device:
            counts["device_hits"] += 1
        else:
            counts["host_hits" if depth < device + host else "misses"] += 1
            # An arrival on a full device pushes its least recently used model down.
            counts["evictions"] += len(stack) >= device
        if name in stack:
            stack.remove(name)
        stack.insert(0, name)
    return counts


def workload(path: Path, each: int, trace: list[str]) -> dict[str, object]:
    registry = _registry(path, 2.5, 3.5, each)
    errors = 0
    try:
        for name in trace:
            try:
                model = registry.ensure(name).result()
                model.run([model.adapter.prepare([0.0] * 64)])
            except Exception:
                errors += 1
        measured = {
            "device_hits": _counter(registry, "inferlane_model_tier_hits_total", tier="device"),
            "host_hits": _counter(registry, "inferlane_model_tier_hits_total", tier="host"),
            "misses": _counter(registry, "inferlane_model_tier_misses_total"),
        }
        measured["evictions"] = _counter(registry, "inferlane_model_evictions_total", tier="device")
    finally:
        registry.close()
    expected = _lru_expectation(trace, 2, 3)
    return {"errors": errors, "match": measured == expected, **measured, "expected": expected}


def _drop_page_cache(path: Path) -> None:
    for file in path.rglob("*") if path.is_dir() else [path]:
        if not file.is_file():
            continue
        fd = os.open(file, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def promotion_vs_load(path: Path, a: str, b: str, each: int, rounds: int) -> dict[str, float]:
    """Switching between ``a`` and ``b`` (``each`` bytes at most), with room for one on
    the device and both on the host: every switch is a promotion. Cold loads: nothing on
    the host, so every switch reads disk."""
    timings: dict[str, list[float]] = {"promotion": [], "cold_cached": [], "cold_uncached": []}
    warm = _registry(path, 1.0, 3, each)
    cold = _registry(path, 1.0, 0, each)
    try:
        for registry, kind in ((warm, "promotion"), (cold, "cold_cached"), (cold, "cold_uncached")):
            registry.ensure(a).result()
            registry.ensure(b).result()
            for _ in range(rounds):  # timed: a coming back; b only pushes it out
                registry.ensure(b).result()
                if kind == "cold_uncached":
                    _drop_page_cache(registry.spec(a).path)
                started = time.perf_counter()
                registry.ensure(a).result()
                timings[kind].append(time.perf_counter() - started)
    finally:
        warm.close()
        cold.close()
    medians = {k: statistics.median(v) for k, v in timings.items()}
    return {
        **{f"{k}_ms": round(v * 1000, 3) for k, v in medians.items()},
        "ratio_cached": round(medians["cold_cached"] / medians["promotion"], 1),
        "ratio_uncached": round(medians["cold_uncached"] / medians["promotion"], 1),
    }


def rss_over_swaps(path: Path, each: int, swaps: int) -> dict[str, float]:
    registry = _registry(path, 1, 0, each)
    names = [f"{COPY_PREFIX}1", f"{COPY_PREFIX}2"]
    marks: dict[int, int] = {}
    try:
        for i in range(1, swaps + 1):
            model = registry.ensure(names[i % 2]).result()
            model.run([model.adapter.prepare([0.0] * 64)])
            del model
            if i in (10, swaps):
                marks[i] = rss_bytes()
    finally:
        registry.close()
    return {
        "rss_after_10_mb": round(marks[10] / 2**20, 1),
        f"rss_after_{swaps}_mb": round(marks[swaps] / 2**20, 1),
        "growth_pct": round(100 * (marks[swaps] - marks[10]) / marks[10], 2),
    }


def pinned_bandwidth() -> dict[str, float] | None:
    """Host→device copy GB/s, pinned against pageable (CUDA only)."""
    if not torch.cuda.is_available():
        return None
    size = 256 << 20
    pageable = torch.empty(size, dtype=torch.uint8)
    pinned = pageable.pin_memory()
    target = torch.empty(size, dtype=torch.uint8, device="cuda")
    rates = {}
    for kind, source in (("pageable", pageable), ("pinned", pinned)):
        target.copy_(source, non_blocking=True)
        torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(10):
            target.copy_(source, non_blocking=True)
        torch.cuda.synchronize()
        rates[f"{kind}_gb_s"] = round(10 * size / (time.perf_counter() - started) / 1e9, 1)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=400, help="per workload")
    parser.add_argument("--swaps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=40, help="promotions and cold loads")
    parser.add_argument("--folder", type=Path, default=None, help="where the copies go")
    args = parser.parse_args()
    tune_process(WorkerSettings())  # the worker's malloc arenas, as in production
    folder = args.folder or Path(tempfile.mkdtemp(prefix="inferlane-store-"))
    path = write_copies(folder, MODELS)
    probe = ModelRegistry.from_toml(path)
    each = tensor_bytes(probe.get(f"{COPY_PREFIX}1").module)
    probe.close()
    names = [f"{COPY_PREFIX}{i}" for i in range(1, MODELS + 1)]
    rng = random.Random(0)
    zipf = [1 / (i + 1) ** 1.1 for i in range(MODELS)]
    traces = {
        "round_robin": [names[i % MODELS] for i in range(args.requests)],
        "zipf_1.1": rng.choices(names, zipf, k=args.requests),
    }
    print(f"{MODELS} models of {each:,} measured bytes; device budget 2.5x, host 3.5x")
    for label, trace in traces.items():
        print(label, workload(path, each, trace))
    print("rss", rss_over_swaps(path, each, args.swaps))
    a, b = f"{COPY_PREFIX}1", f"{COPY_PREFIX}2"
    print("promotion_vs_cold_load digits", promotion_vs_load(path, a, b, each, args.rounds))
    demo = folder / "registry.toml"
    probe = ModelRegistry.from_toml(demo)
    minilm = tensor_bytes(probe.get("minilm").module)
    probe.close()
    rounds = max(2, args.rounds // 5)
    print(
        "promotion_vs_cold_load minilm", promotion_vs_load(demo, "minilm", "digits", minilm, rounds)
    )
    print("cuda_copies", pinned_bandwidth() or "skipped: no CUDA device")


if __name__ == "__main__":
    main()
