"""Step load: idle -> saturating -> idle -> saturating, and adaptive against fixed caps.

The step profile runs once per policy (adaptive: the controller; naive: the
utilization rule alone), each in its own worker on a fresh broker. Saturating keeps a
backlog of requests outstanding (sent, no result yet) for the whole phase; idle sends
nothing. The worker's /metrics is scraped every 0.5 s for the batch cap and the
utilization its controller saw; throughput and p99 (server latency) are binned per
second from the results topic. Writes ``step_load-<model>.png``.

Saturated throughput against fixed caps is measured in pairs: a worker with the adaptive
cap and one with the cap fixed at N, back to back (the order alternating), each through
one saturating phase, ``plan.step_pairs`` pairs per size. Separate workers minutes
apart differ by up to 10% on a shared VM; a pair sees the same stretch of it. Per size,
the figure is the median of the pairs' adaptive/fixed ratios.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
import urllib.request
from typing import Any

import orjson
from prometheus_client.parser import text_string_to_metric_families

from bench import workloads
from bench.kafka_io import TOPICS, ResultsReader, producer
from bench.measure import Latency
from bench.scenarios.common import (
    SERVER,
    Context,
    Measured,
    inferlane,
    median_run,
    on_fresh_broker,
    read_while_alive,
    worker_env,
)
from worker.intake.broker import free_port

POLICIES = ("adaptive", "naive")
# Fixed caps paired with adaptive, each a size the registry allows (digits: up to 256).
# minilm's 8 ran 12-39% below its best fixed size in each of the four unpaired
# step-load runs (docs/SCHEDULING.md), so no pair spends time on it.
FIXED_SIZES = {"digits": (64, 128, 256), "minilm": (16, 32, 64)}
PHASE_S = {
    "smoke": (1.0, 3.0, 1.0, 3.0),
    "quick": (4.0, 14.0, 4.0, 14.0),
    "full": (10.0, 45.0, 10.0, 45.0),
}
# The backlog a saturating phase keeps: deeper than what the worker holds in its executor
# and in transit, so the lanes stay deep at any cap (saturation: the worker, not the load,
# sets the pace). minilm's 400 left its lane thin at caps near 64 (2 replicas x 3 batches
# in the executor, plus results in the sink), where grouping by length pads more; a
# saturating phase then drains into the idle one after it (minilm: ~5 s).
OUTSTANDING = {"digits": 4000, "minilm": 1000}
SCRAPE_S = 0.5


def _record(model: str, i: int, *, prefix: str) -> workloads.Record:
    body = workloads.request_dict(model, i, prefix=prefix)
    return body["request_id"].encode(), orjson.dumps(body)


def _scrape(port: int, model: str) -> tuple[float | None, float | None]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
        text = response.read().decode()
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("model") == model:
                found[sample.name] = sample.value
    return found.get("inferlane_batch_cap_requests"), found.get("inferlane_utilization_ratio")


async def _sampler(
    port: int,
    model: str,
    t0: float,
    stop: asyncio.Event,
    into: list[tuple[float, float | None, float | None]],
) -> None:
    while not stop.is_set():
        with contextlib.suppress(OSError):
            cap, util = await asyncio.to_thread(_scrape, port, model)
            into.append((time.monotonic() - t0, cap, util))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), SCRAPE_S)


async def _reader_loop(reader: ResultsReader, stop: asyncio.Event) -> None:
    while not stop.is_set():
        await reader.poll(50)


async def _load(
    bootstrap: str,
    model: str,
    reader: ResultsReader,
    phases: tuple[float, ...],
    t0: float,
    sent0: int,
) -> int:
    """Run the phases; saturating ones top the outstanding backlog up every 50 ms."""
    prod = producer(bootstrap)
    await prod.start()
    sent, target = 0, OUTSTANDING[model]
    try:
        start = t0
        for i, seconds in enumerate(phases):
            end = start + seconds
            while time.monotonic() < end:
                outstanding = sent + sent0 - reader.count
                if i % 2 == 1 and outstanding < target:
                    futures = []
                    for j in range(target - outstanding):
                        key, value = _record(model, sent + j, prefix="step")
                        futures.append(await prod.send(TOPICS.normal, value, key=key))
                    sent += len(futures)
                    await asyncio.gather(*futures)
                await asyncio.sleep(0.05)
            start = end
        return sent
    finally:
        await prod.stop()


def _bins(reader: ResultsReader, t0: float, total_s: float) -> list[dict[str, Any]]:
    """Per second since t0: results and the p99 of their server latency."""
    bins: list[list[float]] = [[] for _ in range(int(total_s) + 1)]
    for arrival in reader.arrivals:
        second = int(arrival.mono_s - t0)
        if 0 <= second < len(bins):
            for value in arrival.values:
                bins[second].append(float(orjson.loads(value)["latency_ms"]["total"]))
    return [
        {"t_s": i, "rps": len(b), "p99_ms": Latency.of(b).p99_ms if b else None}
        for i, b in enumerate(bins)
    ]


def _settled(
    series: list[tuple[float, float | None, float | None]],
    bins: list[dict[str, Any]],
    phases: tuple[float, ...],
) -> dict[str, Any]:
    """Per saturating phase, over its second half: the cap's coefficient of variation,
    the mean cap and the throughput."""
    out, start = [], 0.0
    for i, seconds in enumerate(phases):
        if i % 2 == 1:
            lo, hi = start + seconds / 2, start + seconds
            caps = [c for t, c, _ in series if lo <= t < hi and c is not None]
            rates = [b["rps"] for b in bins if lo <= b["t_s"] and b["t_s"] + 1 <= hi]
            mean = statistics.fmean(caps) if caps else None
            cv = statistics.pstdev(caps) / mean if caps and mean else None
            out.append(
                {
                    "phase": i,
                    "cap_mean": mean,
                    "cap_cv": cv,
                    "rps": statistics.fmean(rates) if rates else None,
                }
            )
        start += seconds
    return {"saturated": out}


async def measure(
    ctx: Context, model: str, policy: str, phases: tuple[float, ...], name: str = ""
) -> Measured:
    """``policy``: adaptive, naive, or fixed-N; ``name`` tells runs of one policy apart
    in file names."""
    port = free_port()
    name = name or policy
    db = ctx.path(f"step_load-{model}-{name}.db")
    db.unlink(missing_ok=True)
    extra = (*ctx.worker_args, "--http-port", str(port))
    kind, _, size = policy.partition("-")
    if size:
        extra = (*extra, "--max-batch", size)
    log = ctx.path(f"logs/step_load-{model}-{name}.log")
    # naive is a baseline the bench passes to the worker; fixed is a setting.
    baseline = "naive" if kind == "naive" else None
    system = on_fresh_broker(inferlane(ctx, db, extra, baseline), log)
    setting = None if baseline else kind
    with worker_env(INFERLANE_SCHEDULING__POLICY=setting):  # the worker reads it at start
        async with system as (bootstrap, reader, service):
            prod = producer(bootstrap)
            await prod.start()
            key, value = _record(model, 0, prefix="warm")
            await prod.send_and_wait(TOPICS.normal, value, key=key)
            await prod.stop()
            await read_while_alive(reader, service, 1, timeout_s=ctx.plan.timeout_s)
            t0, stop = time.monotonic(), asyncio.Event()
            samples: list[tuple[float, float | None, float | None]] = []
            tasks = [
                asyncio.create_task(_sampler(port, model, t0, stop, samples)),
                asyncio.create_task(_reader_loop(reader, stop)),
            ]
            try:
                await _load(bootstrap, model, reader, phases, t0, reader.count)
            finally:
                stop.set()
                await asyncio.gather(*tasks)
            service.check_alive()
            assert service.rss is not None
            peak = service.rss.peak_mb
    total_s = sum(phases)
    bins = _bins(reader, t0, total_s)
    settled = _settled(samples, bins, phases)
    sat = [s for s in settled["saturated"] if s["rps"] is not None]
    rate = statistics.fmean(s["rps"] for s in sat) if sat else 0.0
    lat = Latency.of([b["p99_ms"] for b in bins if b["p99_ms"] is not None] or [0.0])
    ctx.say(
        f"  step_load {model} {name}: saturated "
        + ", ".join(
            f"{s['rps'] or 0:,.0f}/s at cap {s['cap_mean'] or 0:.0f} (CV {s['cap_cv'] or 0:.2f})"
            for s in settled["saturated"]
        )
    )
    extra_out = {
        "policy": policy,
        "phases_s": phases,
        "outstanding": OUTSTANDING[model],
        "samples": samples,
        "bins": bins,
        **settled,
    }
    return Measured(
        "step_load",
        model,
        f"inferlane-{policy}",
        rate,
        lat.p50_ms,
        lat.p99_ms,
        peak,
        sum(b["rps"] for b in bins),
        total_s,
        SERVER,
        extra_out,
    )


def plot(ctx: Context, model: str, runs: list[Measured]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(4, 1, figsize=(11, 11), sharex=True)
    ax_cap, ax_util, ax_rps, ax_p99 = axes
    for m in runs:
        label = m.extra["policy"]
        samples = [(t, c, u) for t, c, u in m.extra["samples"]]
        ax_cap.step(
            [t for t, _, _ in samples], [c for _, c, _ in samples], where="post", label=label
        )
        ax_util.plot([t for t, _, _ in samples], [u for _, _, u in samples], label=label)
        bins = m.extra["bins"]
        ax_rps.plot([b["t_s"] for b in bins], [b["rps"] for b in bins], label=label)
        ax_p99.plot([b["t_s"] for b in bins], [b["p99_ms"] for b in bins], label=label)
    start = 0.0
    for i, seconds in enumerate(runs[0].extra["phases_s"] if runs else ()):
        if i % 2 == 1:
            for ax in axes:
                ax.axvspan(start, start + seconds, color="grey", alpha=0.1)
        start += seconds
    ax_cap.set_ylabel("batch cap")
    ax_cap.set_yscale("log", base=2)
    ax_util.set_ylabel("utilization seen")
    ax_rps.set_ylabel("results/s")
    ax_p99.set_ylabel("p99 server latency, ms")
    ax_p99.set_yscale("log")
    ax_p99.set_xlabel("seconds (shaded: saturating phases)")
    ax_cap.set_title(f"step load, {model}: batch cap policies")
    for ax in axes:
        ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(ctx.path(f"step_load-{model}.png"), dpi=100)
    plt.close(fig)


def pairs(ctx: Context, model: str) -> list[Measured]:
    """Adaptive against each fixed size in back-to-back pairs; per size, the fixed runs'
    median with the pairs' adaptive/fixed ratios, and the adaptive runs' median."""
    phases = (0.0, PHASE_S[ctx.plan.mode][1])  # one saturating phase
    adaptive: dict[int, list[Measured]] = {n: [] for n in FIXED_SIZES[model]}
    fixed: dict[int, list[Measured]] = {n: [] for n in FIXED_SIZES[model]}
    for k in range(ctx.plan.step_pairs):
        for i, size in enumerate(FIXED_SIZES[model]):
            order = ("adaptive", f"fixed-{size}")
            for policy in order if (k + i) % 2 == 0 else order[::-1]:
                side = adaptive if policy == "adaptive" else fixed
                run_name = f"pair{k}-{size}-{policy}"
                side[size].append(asyncio.run(measure(ctx, model, policy, phases, run_name)))
    out = []
    for size in FIXED_SIZES[model]:
        ratios = [
            a.throughput_rps / f.throughput_rps if f.throughput_rps else 0.0
            for a, f in zip(adaptive[size], fixed[size], strict=True)
        ]
        ctx.say(
            f"  step_load {model} adaptive over fixed {size}: "
            f"median {statistics.median(ratios):.3f} of {len(ratios)} pairs "
            f"(min {min(ratios):.3f}, max {max(ratios):.3f})"
        )
        out.append(
            median_run(
                fixed[size],
                f"inferlane-fixed-{size}",
                pair_ratios=[round(r, 4) for r in ratios],
                adaptive_runs_rps=[round(a.throughput_rps, 1) for a in adaptive[size]],
            )
        )
    every_adaptive = [m for runs in adaptive.values() for m in runs]
    out.append(median_run(every_adaptive, "inferlane-adaptive-paired"))
    return out


def run(ctx: Context) -> list[Measured]:
    out: list[Measured] = []
    for model in ctx.plan.models:
        phases = PHASE_S[ctx.plan.mode]
        runs = [asyncio.run(measure(ctx, model, policy, phases)) for policy in POLICIES]
        plot(ctx, model, runs)
        out += runs + pairs(ctx, model)
    return out


def judged(runs: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """One model's runs (by system): adaptive's worst cap CV over the step profile's
    saturated phases' second halves, and its saturated throughput over the best fixed
    cap's: per size the median of the pairs' ratios, and the lowest of those (with that
    size's pair ratios' min and max)."""
    adaptive = runs.get("inferlane-adaptive")
    if adaptive is None:
        return {}
    cvs = [s["cap_cv"] for s in adaptive["extra"]["saturated"]]
    paired = [m["extra"]["pair_ratios"] for name, m in runs.items() if "-fixed-" in name]
    worst = min(paired, key=statistics.median, default=None)
    return {
        "adaptive_cap_cv_max": max(cvs) if cvs and None not in cvs else None,
        "adaptive_over_best_fixed": statistics.median(worst) if worst else None,
        "adaptive_over_best_fixed_pairs_min": min(worst) if worst else None,
        "adaptive_over_best_fixed_pairs_max": max(worst) if worst else None,
    }
