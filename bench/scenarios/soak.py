"""Soak: a long digits backlog through the worker; its RSS over time.

The backlog is published while the worker starts; RSS is sampled every 0.5 s.
Warm-up ends when a quarter of the results are in; growth after warm-up is
(RSS at the last result - RSS at the end of warm-up) / RSS at the end of warm-up.
"""

from __future__ import annotations

import asyncio

from bench import workloads
from bench.kafka_io import TOPICS, publish
from bench.measure import Latency, window_rate
from bench.scenarios.common import (
    SERVER,
    Context,
    Measured,
    inferlane,
    on_fresh_broker,
    parse,
    read_while_alive,
)
from bench.scenarios.common import server_latencies as latencies

MODEL = "digits"
WARM_UP_SHARE = 0.25


async def measure(ctx: Context) -> Measured:
    n = ctx.plan.soak_requests
    db = ctx.path("soak.db")
    db.unlink(missing_ok=True)
    system = on_fresh_broker(inferlane(ctx, db), ctx.path("logs/soak.log"))
    async with system as (bootstrap, reader, service):
        await publish(bootstrap, TOPICS.normal, workloads.records(MODEL, n, prefix="soak"))
        await read_while_alive(reader, service, n, timeout_s=ctx.plan.timeout_s)
        rss = service.rss
        assert rss is not None
    arrivals = [a for a in reader.arrivals if a.values]
    seen, warm_at = 0, arrivals[-1].mono_s
    for a in arrivals:
        seen += len(a.values)
        if seen >= WARM_UP_SHARE * n:
            warm_at = a.mono_s
            break
    start_s, end_s = rss.samples[0][0], arrivals[-1].mono_s
    rss_warm, rss_end = rss.rss_at(warm_at), rss.rss_at(end_s)
    growth = (rss_end - rss_warm) / rss_warm if rss_warm else 0.0
    rate, counted, seconds = window_rate(reader.arrivals)
    lat = Latency.of(latencies(parse(reader.values())))
    ctx.say(
        f"  soak: {reader.count:,}/{n:,} results, {rate:,.0f}/s; RSS "
        f"{rss_warm / 2**20:.0f} MiB after warm-up -> {rss_end / 2**20:.0f} MiB "
        f"({growth:+.1%}), peak {rss.peak_mb:.0f} MiB"
    )
    series = [(round(t - start_s, 2), round(b / 2**20, 1)) for t, b in rss.samples]
    return Measured(
        "soak",
        MODEL,
        "inferlane",
        rate,
        lat.p50_ms,
        lat.p99_ms,
        rss.peak_mb,
        counted,
        seconds,
        SERVER,
        {
            "requests": n,
            "completed": reader.count,
            "rss_warm_mb": rss_warm / 2**20,
            "rss_end_mb": rss_end / 2**20,
            "rss_growth": growth,
            "warm_up_end_s": round(warm_at - start_s, 2),
            "last_result_s": round(end_s - start_s, 2),
            "series": series,
        },
    )


def run(ctx: Context) -> Measured:
    return asyncio.run(measure(ctx))
