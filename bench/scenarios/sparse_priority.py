"""Sparse priority: lone `high` digits requests, 100-500 ms apart, beside a saturating backlog.

The priority scenario sends high requests at a steady 20/s; here each one comes alone,
at random gaps of 100-500 ms (seeded), the way a few urgent requests a second arrive
during a bulk job. Per backlog model (the plan's models), one worker with its lanes, on
a fresh broker, in this order:

1. *idle*: the high requests alone (every window's gaps, back to back): the idle p50 and
   p99, end to end (send -> result read from the results topic);
2. the backlog on the low topic, unmeasured for ``sparse_warm_s`` after its first result
   (the batch controller climbs);
3. ``sparse_windows`` *mixed* windows with the same gaps, the backlog alone for
   ``sparse_solo_s`` before the first, between each two and after the last.

Judged per model: the mixed p99 over 2x the idle p99 + 50 ms, the mixed p50 over the
idle p50 + 20 ms, and the backlog's rate in each mixed window over the mean of its rates
alone just before and after (the median of the windows). Writes
``sparse_priority.png``: each high request's latency over time, and the backlog's
results per second.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from itertools import pairwise
from typing import Any

from aiokafka import AIOKafkaProducer

from bench import workloads
from bench.kafka_io import TOPICS, ResultsReader, publish
from bench.measure import Latency
from bench.procs import Service
from bench.scenarios.common import (
    END_TO_END,
    Context,
    Measured,
    inferlane,
    on_fresh_broker,
    read_for,
    read_while_alive,
)
from bench.scenarios.high_cost import BACKLOG_RPS
from bench.scenarios.priority import HIGH, MODEL, build_high, high_latencies, low_rate, read_high

GAP_S = (0.1, 0.5)  # between two high requests, uniform
P99_FACTOR, P99_SLACK_MS, P50_SLACK_MS = 2.0, 50.0, 20.0  # issue 44's bounds
WARM_HIGH = 3  # unmeasured high requests first: the group joins, digits loads


def gaps(seed: int, seconds: float) -> list[float]:
    """Random gaps (``GAP_S``) that fill ``seconds``: one high request after each."""
    rng, out = random.Random(seed), list[float]()
    while sum(out) < seconds:
        out.append(rng.uniform(*GAP_S))
    return out


async def send_sparse(producer: AIOKafkaProducer, wait_s: list[float], first: int) -> int:
    """One high request after each gap, numbered from ``first``; each sent alone."""
    for i, gap in enumerate(wait_s):
        await asyncio.sleep(gap)
        key, value = workloads.timed_record(MODEL, first + i, prefix=HIGH)
        await (await producer.send(TOPICS.high, value, key=key))
    return len(wait_s)


async def _window(
    producer: AIOKafkaProducer,
    reader: ResultsReader,
    service: Service,
    wait_s: list[float],
    first: int,
    timeout_s: float,
) -> tuple[float, float]:
    """Send ``wait_s``'s requests, reading until each is answered: (start, end), wall."""
    start = time.time()
    sender = asyncio.create_task(send_sparse(producer, wait_s, first))
    await read_high(reader, service, len(wait_s), sum(wait_s) + timeout_s)
    await sender
    return start, time.time()


def backlog_size(ctx: Context, model: str, rate_rps: float | None) -> int:
    """Enough to outlast the windows: 1.5x this run's measured rate, else the rate
    ``high_cost`` assumes above this VM's, over every phase plus start-up."""
    plan = ctx.plan
    seconds = (
        plan.sparse_warm_s
        + plan.sparse_solo_s * (plan.sparse_windows + 1)
        + plan.sparse_window_s * plan.sparse_windows
        + 4
    )
    return int((1.5 * rate_rps if rate_rps else BACKLOG_RPS[model]) * seconds)


def low_over_solo(during: list[float], solo: list[float]) -> list[float]:
    """Each mixed window's backlog rate over the mean of the solo windows just before and
    after it; none for a window beside a solo window that saw under two result fetches
    (a rate of 0: minilm's batches can take seconds on a loaded machine)."""
    pairs = zip(during, pairwise(solo), strict=True)
    return [r / ((a + b) / 2) for r, (a, b) in pairs if a and b]


def _split(
    series: list[tuple[float, float, float, float]], windows: list[tuple[float, float]]
) -> tuple[list[tuple[float, float, float, float]], list[tuple[float, float, float, float]]]:
    """High requests sent in the idle window (the first) and in the mixed ones."""
    (idle_start, idle_end), mixed = windows[0], windows[1:]
    idle = [s for s in series if idle_start <= s[0] <= idle_end]
    busy = [s for s in series if any(a <= s[0] <= b for a, b in mixed)]
    return idle, busy


def _low_per_second(reader: ResultsReader, t0: float, since: float) -> list[tuple[int, int]]:
    """Backlog results per wall-clock second since ``t0``, from ``since`` on."""
    marker = HIGH.encode() + b"-"
    bins: dict[int, int] = {}
    for a in reader.arrivals:
        if a.wall_s < since:
            continue
        second = int(a.wall_s - t0)
        bins[second] = bins.get(second, 0) + sum(marker not in v for v in a.values)
    return sorted(bins.items())


async def measure(ctx: Context, model: str, backlog: int) -> Measured:
    plan = ctx.plan
    db = ctx.path(f"sparse_priority-{model}.db")
    db.unlink(missing_ok=True)
    log = ctx.path(f"logs/sparse_priority-{model}.log")
    per_window = [gaps(seed, plan.sparse_window_s) for seed in range(plan.sparse_windows)]
    every = [g for w in per_window for g in w]
    command = inferlane(ctx, db)
    async with on_fresh_broker(command, log) as (bootstrap, reader, service):
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
        await producer.start()
        try:
            build_high()
            await _window(producer, reader, service, [0.2] * WARM_HIGH, 0, plan.timeout_s)
            n = WARM_HIGH
            windows = [await _window(producer, reader, service, every, n, plan.timeout_s)]
            n += len(every)
            await publish(bootstrap, TOPICS.low, workloads.records(model, backlog, prefix="bulk"))
            await read_while_alive(reader, service, reader.count + 1, timeout_s=plan.timeout_s)
            await read_for(reader, service, plan.sparse_warm_s)
            warm = time.time()
            solo = [await _solo(reader, service, plan.sparse_solo_s)]
            for wait_s in per_window:
                windows.append(await _window(producer, reader, service, wait_s, n, plan.timeout_s))
                n += len(wait_s)
                solo.append(await _solo(reader, service, plan.sparse_solo_s))
        finally:
            await producer.stop()
        assert service.rss is not None
        peak = service.rss.peak_mb
    return _measured(ctx, model, reader, windows, solo, backlog, n, peak, warm)


async def _solo(reader: ResultsReader, service: Service, seconds: float) -> float:
    start = time.time()
    await read_for(reader, service, seconds)
    return low_rate(reader, start, time.time())


def _measured(
    ctx: Context,
    model: str,
    reader: ResultsReader,
    windows: list[tuple[float, float]],
    solo: list[float],
    backlog: int,
    sent: int,
    peak_mb: float,
    warm: float,
) -> Measured:
    """``warm``: when the backlog's warm-up ended (wall clock); times in ``extra`` count
    from the idle window's start."""
    series = high_latencies(reader)
    idle, busy = _split(series, windows)
    t0 = windows[0][0]
    idle_lat, busy_lat = Latency.of([s[1] for s in idle]), Latency.of([s[1] for s in busy])
    idle_srv, busy_srv = Latency.of([s[2] for s in idle]), Latency.of([s[2] for s in busy])
    idle_out, busy_out = Latency.of([s[3] for s in idle]), Latency.of([s[3] for s in busy])
    during = [low_rate(reader, a, b) for a, b in windows[1:]]
    ratios = low_over_solo(during, solo)
    judged = statistics.median(ratios) if ratios else None
    low_done = reader.count - len(series)
    extra: dict[str, Any] = {
        "backlog_model": model,
        "gap_s": GAP_S,
        "idle_p50_ms": idle_lat.p50_ms,
        "idle_p99_ms": idle_lat.p99_ms,
        "idle_requests": len(idle),
        "mixed_requests": len(busy),
        "high_sent": sent - WARM_HIGH,
        "server_idle_p50_ms": idle_srv.p50_ms,
        "server_idle_p99_ms": idle_srv.p99_ms,
        "server_p50_ms": busy_srv.p50_ms,
        "server_p99_ms": busy_srv.p99_ms,
        # Sent -> the result's Kafka timestamp: end to end without the harness's read.
        "produced_idle_p50_ms": idle_out.p50_ms,
        "produced_idle_p99_ms": idle_out.p99_ms,
        "produced_p50_ms": busy_out.p50_ms,
        "produced_p99_ms": busy_out.p99_ms,
        "p99_bound_ms": P99_FACTOR * idle_lat.p99_ms + P99_SLACK_MS,
        "p50_bound_ms": idle_lat.p50_ms + P50_SLACK_MS,
        "low_rps_alone": solo,  # before the first window, between windows, after the last
        "low_rps_windows": during,
        "low_over_solo_windows": ratios,
        "low_over_solo": judged,
        "low_backlog": backlog,
        "low_done_at_end": low_done,
        "saturated": low_done < backlog,
        # Seconds since the idle window's start: the windows, and every measured request.
        "windows_s": [(round(a - t0, 3), round(b - t0, 3)) for a, b in windows],
        "series": [(round(s[0] - t0, 3), round(s[1], 2)) for s in idle + busy],
        "low_per_s": _low_per_second(reader, t0, warm),
    }
    ctx.say(
        f"  sparse priority, {model} backlog: high p50 {busy_lat.p50_ms:.1f} ms, "
        f"p99 {busy_lat.p99_ms:.1f} ms ({len(busy)} requests) against idle p50 "
        f"{idle_lat.p50_ms:.1f} ms, p99 {idle_lat.p99_ms:.1f} ms ({len(idle)}); result produced "
        f"p50 {busy_out.p50_ms:.1f} / idle {idle_out.p50_ms:.1f} ms, p99 {busy_out.p99_ms:.1f} / "
        f"idle {idle_out.p99_ms:.1f} ms; in the worker "
        f"p50 {busy_srv.p50_ms:.1f} / idle {idle_srv.p50_ms:.1f} ms, p99 {busy_srv.p99_ms:.1f}"
        f" / idle {idle_srv.p99_ms:.1f} ms; low lane {', '.join(f'{r:,.0f}' for r in during)}/s"
        f" in the windows, {', '.join(f'{r:,.0f}' for r in solo)}/s alone around them: "
        f"{'-' if judged is None else f'{judged:.3f}'} of its solo rate (median); "
        f"saturated={extra['saturated']}"
    )
    return Measured(
        "sparse_priority",
        model,
        "inferlane-lanes",
        statistics.fmean(during) if during else 0.0,
        busy_lat.p50_ms,
        busy_lat.p99_ms,
        peak_mb,
        len(busy),
        sum(b - a for a, b in windows[1:]),
        END_TO_END,
        extra,
    )


def judged(m: dict[str, Any]) -> dict[str, float | None]:
    """One model's result: the mixed p99 and p50 over their bounds, and the backlog's
    rate beside the high requests over its rate alone."""
    extra = m["extra"]
    return {
        "high_p50_ms": m["p50_ms"],
        "high_p99_ms": m["p99_ms"],
        "idle_p50_ms": extra["idle_p50_ms"],
        "idle_p99_ms": extra["idle_p99_ms"],
        "high_p50_over_bound": _div(m["p50_ms"], extra["p50_bound_ms"]),
        "high_p99_over_bound": _div(m["p99_ms"], extra["p99_bound_ms"]),
        "low_over_solo": extra["low_over_solo"],
    }


def _div(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def plot(ctx: Context, runs: list[Measured]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(runs), 1, figsize=(11, 4 * len(runs)), squeeze=False)
    for ax, m in zip(axes[:, 0], runs, strict=True):
        (idle_a, idle_b), *mixed = m.extra["windows_s"]
        ax.axvspan(idle_a, idle_b, color="tab:green", alpha=0.08, label="idle worker")
        for i, (a, b) in enumerate(mixed):
            ax.axvspan(a, b, color="grey", alpha=0.15, label=None if i else "with the backlog")
        series = m.extra["series"]
        ax.plot(
            [t for t, _ in series],
            [ms for _, ms in series],
            ".",
            color="tab:red",
            label="high request, end to end",
        )
        ax.axhline(m.extra["p99_bound_ms"], color="tab:red", linestyle=":", label="p99 bound")
        ax.set_yscale("log")
        ax.set_ylabel("high latency, ms (log)")
        ax.set_xlabel("seconds since the idle window's start")
        ax.set_title(f"sparse priority, {m.model} backlog (low topic), digits high requests")
        ax.legend(loc="upper left", fontsize=8)
        low = ax.twinx()
        per_s = m.extra["low_per_s"]
        low.step([t for t, _ in per_s], [c for _, c in per_s], where="post", alpha=0.5)
        low.set_ylabel("backlog results/s", color="tab:blue")
    fig.tight_layout()
    fig.savefig(ctx.path("sparse_priority.png"), dpi=100)
    plt.close(fig)


def run(ctx: Context, rates_rps: dict[str, float]) -> list[Measured]:
    """Per backlog model; ``rates_rps``: inferlane's rate per model measured earlier in
    the run (sizes the backlog)."""
    out = [
        asyncio.run(measure(ctx, model, backlog_size(ctx, model, rates_rps.get(model))))
        for model in ctx.plan.models
    ]
    plot(ctx, out)
    return out
