"""High cost (opt-in, ``--only high_cost``): what high requests cost a backlog, in one worker.

Per backlog model (the plan's models), one worker with its lanes and that model's
backlog on the low topic. After a warm-up, windows of ``high_cost_window_s`` alternate:
the backlog alone, then the backlog while `high` digits requests arrive at
``high_cost_rate_hz`` (above the priority scenario's 20/s, so that the cost per high
request stands out of the machine's noise), ``high_cost_pairs`` times. Neighbouring
windows of the same worker share the machine's state of the moment, so the pair ratio
(backlog rate with high requests over without) moves far less than a comparison across
runs. Settings under test come from the environment (``INFERLANE_*``), as in every
scenario.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import time

from bench import workloads
from bench.kafka_io import TOPICS, publish
from bench.scenarios.common import (
    Context,
    Measured,
    inferlane,
    on_fresh_broker,
    read_for,
    read_while_alive,
)
from bench.scenarios.priority import build_high, low_rate, send_high

WARM_S = 8.0  # the first seconds after the first result: caches, curve, chunk sizes settle
# More than this VM's rate per backlog model: the backlog outlasts the windows.
BACKLOG_RPS = {"digits": 12_000, "minilm": 400}


async def _windows(ctx: Context, model: str) -> tuple[list[float], list[float], list[float], float]:
    """The ``model`` backlog's rate in each window without and with high requests, the
    worker's CPU (cores) in each window, in order, and its peak RSS."""
    plan = ctx.plan
    window_s, rate_hz = plan.high_cost_window_s, plan.high_cost_rate_hz
    backlog = int(BACKLOG_RPS[model] * (WARM_S + 2 * plan.high_cost_pairs * window_s + 4))
    db = ctx.path(f"high_cost-{model}.db")
    db.unlink(missing_ok=True)
    off: list[float] = []
    on: list[float] = []
    cpu: list[float] = []
    system = on_fresh_broker(inferlane(ctx, db), ctx.path(f"logs/high_cost-{model}.log"))
    async with system as (bootstrap, reader, service):
        await publish(bootstrap, TOPICS.low, workloads.records(model, backlog, prefix="bulk"))
        build_high()
        await read_while_alive(reader, service, 1, timeout_s=plan.timeout_s)
        await read_for(reader, service, WARM_S)
        for i in range(2 * plan.high_cost_pairs):
            with_high = i % 2 == 1
            start, cpu_s = time.time(), service.cpu_s()
            sender = (
                asyncio.create_task(send_high(bootstrap, rate_hz, window_s)) if with_high else None
            )
            await read_for(reader, service, window_s)
            if sender is not None:
                await sender
            end = time.time()
            (on if with_high else off).append(low_rate(reader, start, end))
            cpu.append((service.cpu_s() - cpu_s) / (end - start))
        if reader.count >= backlog:
            raise RuntimeError("the backlog ran out before the last window")
        assert service.rss is not None
        peak = service.rss.peak_mb
    return off, on, cpu, peak


def run(ctx: Context) -> list[Measured]:
    return [_measure(ctx, model) for model in ctx.plan.models]


def _measure(ctx: Context, model: str) -> Measured:
    off, on, cpu, peak = asyncio.run(_windows(ctx, model))
    pairs = [b / a for a, b in zip(off, on, strict=True) if a > 0]
    median = statistics.median(pairs)
    rate_hz = ctx.plan.high_cost_rate_hz
    ctx.say(
        f"  high cost, {model} backlog, {rate_hz:.0f} high/s: backlog with over without "
        f"high requests, median {median:.3f} of {len(pairs)} pairs (min {min(pairs):.3f}, "
        f"max {max(pairs):.3f}); windows without {', '.join(f'{r:,.0f}' for r in off)}/s, "
        f"with {', '.join(f'{r:,.0f}' for r in on)}/s"
    )
    return Measured(
        "high_cost",
        model,  # the backlog's; the high requests are digits
        "inferlane-lanes",
        statistics.median(on),
        math.nan,  # no latencies: a rate scenario
        math.nan,
        peak,
        0,
        ctx.plan.high_cost_window_s * len(on),
        "none: backlog results per second",
        {
            "rate_hz": rate_hz,
            "window_s": ctx.plan.high_cost_window_s,
            "off_rps": [round(r, 1) for r in off],
            "on_rps": [round(r, 1) for r in on],
            "worker_cores": [round(c, 3) for c in cpu],
            "pair_ratios": [round(r, 4) for r in pairs],
            "on_over_off": median,
        },
    )
