"""Ceiling: the model's own forward pass at each batch size; no Kafka, no decoding.

In-process, on pre-collated batches, with the same torch thread count as every other
scenario. For minilm the workload's sentences are sorted by length before they are cut
into batches (the least padding any batcher could achieve). ``run_rps`` adds what the
worker must also do per batch (collate/tokenize, and split the output to JSON values).
``replicas_rps`` runs the best batch size the way the worker's bulk lanes do by default
(``compute.replicas`` passes side by side, each on its share of the torch threads): the
same cores, laid out differently; reported beside the ceiling, not as it. ``again``
times the best batch size once more, just before and just after inferlane's throughput
run. A model the registry optimizes (``optimize = "trace"``: the demo models) is timed
as it serves; its eager module is timed beside it at batch 1 and at the best batch size
(``eager``). At batch 1 the pass is also timed the way a request at low load meets it: each
call after the idle gap between two of the low-load scenario's requests (on this VM a
pass after 0.2 s idle runs markedly slower than back to back: docs/BENCHMARKS.md).
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import psutil
import torch

from bench import workloads
from bench.measure import Latency
from bench.scenarios.common import Context
from worker.execution.torch_threads import set_torch_threads
from worker.models import LoadedModel, ModelRegistry
from worker.models.loaders import load_model
from worker.settings import ComputeConfig


def _items(model: LoadedModel, n: int) -> list[Any]:
    if model.name == "minilm":
        raw: list[Any] = sorted(workloads.texts(n), key=len)
    else:
        raw = workloads.digit_rows(n)
    return [model.adapter.prepare(x) for x in raw]


def _chunks(items: list[Any], size: int) -> list[list[Any]]:
    chunks = [items[i : i + size] for i in range(0, len(items) - size + 1, size)]
    random.Random(0).shuffle(chunks)  # any prefix of the rounds is representative
    return chunks


def _timed(
    fn: Any,
    batches: list[tuple[Any, int]],
    min_s: float,
    calls_ms: list[float] | None = None,
    rounds: int = 3,
) -> float:
    """Items per second: the best of ``rounds`` rounds, each calling ``fn`` over
    ``batches`` in turn, every batch at least once (the whole workload: minilm's batches
    differ in length) and for at least ``min_s / rounds``. Best-of, as timeit does: on a
    shared machine, the fastest round is the one least disturbed by other processes.
    Each call's duration goes to ``calls_ms`` if given."""
    best = 0.0
    for _ in range(rounds):
        done, started, i = 0, time.perf_counter(), 0
        while True:
            batch, size = batches[i % len(batches)]
            t = time.perf_counter()
            fn(batch)
            if calls_ms is not None:
                calls_ms.append((time.perf_counter() - t) * 1000)
            done, i = done + size, i + 1
            elapsed = time.perf_counter() - started
            if elapsed >= min_s / rounds and i >= len(batches):
                break
        best = max(best, done / elapsed)
    return best


IDLE_PASSES = 15  # batch-1 passes timed after an idle gap


def _after_idle(fn: Any, batch: Any, gap_s: float) -> list[float]:
    """Milliseconds of ``IDLE_PASSES`` calls of ``fn(batch)``, each after ``gap_s`` idle."""
    calls = []
    for _ in range(IDLE_PASSES):
        time.sleep(gap_s)
        t = time.perf_counter()
        fn(batch)
        calls.append((time.perf_counter() - t) * 1000)
    return calls


def _side_by_side(fn: Any, batches: list[tuple[Any, int]], min_s: float, replicas: int) -> float:
    """Items per second of ``replicas`` threads calling ``fn`` over ``batches`` (each
    thread every ``replicas``-th) for ``min_s`` and every batch at least once, each
    thread on its share of the torch threads."""
    share = max(1, torch.get_num_threads() // replicas)
    done = [0] * replicas
    stop_at = time.perf_counter() + min_s

    def loop(k: int) -> None:
        set_torch_threads(share)  # this thread's own count, as the worker's replicas do
        i = k
        while time.perf_counter() < stop_at or i < len(batches):
            batch, size = batches[i % len(batches)]
            fn(batch)
            done[k] += size
            i += replicas

    threads = [threading.Thread(target=loop, args=(k,)) for k in range(replicas)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done) / (time.perf_counter() - started)


def _forward(model: LoadedModel) -> Any:
    def call(batch: Any) -> Any:
        with torch.inference_mode():
            return model.module(**batch) if isinstance(batch, dict) else model.module(batch)

    return call


def _workload(ctx: Context, model: LoadedModel) -> list[Any]:
    """The prepared items every batch size is cut from."""
    return _items(model, max(ctx.plan.ceiling_batches[model.name]) * 2)


def measure(ctx: Context, registry: ModelRegistry, name: str) -> dict[str, Any]:
    model = registry.get(name)
    sizes = ctx.plan.ceiling_batches[name]
    items = _workload(ctx, model)
    registry.warmup(name, max(sizes))
    per_batch: dict[str, dict[str, float]] = {}
    for size in sizes:
        chunks = _chunks(items, size)
        collated = [(model.adapter.collate(c), len(c)) for c in chunks]
        _timed(_forward(model), collated[:1], 0.0)  # shape warm-up
        calls: list[float] = []
        forward_rps = _timed(_forward(model), collated, ctx.plan.ceiling_min_s, calls)
        run_rps = _timed(model.run, [(c, len(c)) for c in chunks], ctx.plan.ceiling_min_s)
        lat = Latency.of(calls)
        per_batch[str(size)] = {
            "forward_rps": forward_rps,
            "run_rps": run_rps,
            "p50_ms": lat.p50_ms,
            "p99_ms": lat.p99_ms,
        }
        if size == 1:
            gap_s = 1 / ctx.plan.low_load_rate_hz[name]
            idle = Latency.of(_after_idle(_forward(model), collated[0][0], gap_s))
            per_batch["1"] |= {"idle_gap_s": gap_s, "after_idle_p50_ms": idle.p50_ms}
            ctx.say(
                f"  ceiling {name} batch 1 after {gap_s:g} s idle: p50 {idle.p50_ms:.2f} ms "
                f"(back to back {lat.p50_ms:.2f} ms)"
            )
        ctx.say(
            f"  ceiling {name} batch {size}: {forward_rps:,.0f}/s forward, "
            f"{run_rps:,.0f}/s with collate+split"
        )
    best = max(per_batch, key=lambda k: per_batch[k]["forward_rps"])
    replicas = min(ComputeConfig().replicas, torch.get_num_threads())
    chunks = _chunks(items, int(best))
    replicas_rps = _side_by_side(
        _forward(model), [(model.adapter.collate(c), len(c)) for c in chunks],
        ctx.plan.ceiling_min_s, replicas,
    )  # fmt: skip
    ctx.say(f"  ceiling {name} batch {best}, {replicas} side by side: {replicas_rps:,.0f}/s")
    eager = _eager(ctx, registry, model, items, int(best))
    return {
        "model": name,
        "by_batch": per_batch,
        "best_batch": int(best),
        "throughput_rps": per_batch[best]["forward_rps"],
        "run_rps_at_best": per_batch[best]["run_rps"],
        "replicas": replicas,
        "replicas_rps_at_best": replicas_rps,
        "p50_ms": per_batch[best]["p50_ms"],
        "p99_ms": per_batch[best]["p99_ms"],
        "latency_basis": "one forward pass of the best batch size",
        "eager": eager,
        "peak_rss_mb": psutil.Process().memory_info().rss / 2**20,
        "note": "in the harness process; RSS includes the harness",
    }


def _eager(
    ctx: Context, registry: ModelRegistry, served: LoadedModel, items: list[Any], best: int
) -> dict[str, float] | None:
    """The eager module's p50 pass at batch 1 and items/s at ``best``, timed as the
    served module was; None when the registry serves the model eager."""
    spec = registry.spec(served.name)
    if spec.optimize is None:
        return None
    model = load_model(spec, served.device, served.adapter)
    one = [(model.adapter.collate(c), 1) for c in _chunks(items, 1)]
    calls: list[float] = []
    _timed(_forward(model), one[:1], 0.0)  # warm-up
    _timed(_forward(model), one, ctx.plan.ceiling_min_s, calls)
    at_best = [(model.adapter.collate(c), len(c)) for c in _chunks(items, best)]
    _timed(_forward(model), at_best[:1], 0.0)
    rps = _timed(_forward(model), at_best, ctx.plan.ceiling_min_s)
    p50_ms = Latency.of(calls).p50_ms
    ctx.say(f"  ceiling {served.name} eager: batch 1 p50 {p50_ms:.2f} ms, {best}: {rps:,.0f}/s")
    return {"batch1_p50_ms": p50_ms, "best_batch_rps": rps}


def again(ctx: Context, registry: ModelRegistry, name: str, size: int) -> float:
    """The forward pass's items/s at batch ``size`` once more, timed as ``measure`` times
    it: next to a system's run, so that both see the machine in the same stretch (its
    speed moves by up to 3x from hour to hour)."""
    model = registry.get(name)
    collated = [(model.adapter.collate(c), len(c)) for c in _chunks(_workload(ctx, model), size)]
    return _timed(_forward(model), collated, ctx.plan.ceiling_min_s)
