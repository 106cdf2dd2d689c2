"""Throughput: naive, threadpool and inferlane on the same pre-published backlog.

Each system gets a fresh embedded broker and the same backlog on the normal lane
topic, published while the system starts. Its throughput is counted from the first
result read to the last (results in that first fetch are not counted), so process
start, model load and the consumer group's join (3-5 s on this broker) are excluded.
A run ends when every result is in, or ``run_s`` after its first result.
"""

from __future__ import annotations

import asyncio

from bench import profile, workloads
from bench.kafka_io import TOPICS, publish
from bench.measure import Latency, window_rate
from bench.procs import baseline_command, inferlane_command
from bench.scenarios.common import (
    SERVER,
    Context,
    Measured,
    on_fresh_broker,
    parse,
    read_while_alive,
)
from bench.scenarios.common import server_latencies as latencies


def command(ctx: Context, system: str, bootstrap: str, model: str, tag: str) -> list[str]:
    if system == "inferlane":
        db = ctx.path(f"{tag}.db")
        db.unlink(missing_ok=True)
        return inferlane_command(
            bootstrap, db, torch_threads=ctx.torch_threads, extra=ctx.worker_args
        )
    return baseline_command(system, bootstrap, model, torch_threads=ctx.torch_threads)


async def measure(ctx: Context, model: str, system: str) -> Measured:
    plan, tag = ctx.plan, f"{model}-{system}"
    n = plan.backlog[model]
    under_test = on_fresh_broker(
        lambda bootstrap: command(ctx, system, bootstrap, model, tag), ctx.path(f"logs/{tag}.log")
    )
    async with under_test as (bootstrap, reader, service):
        await publish(bootstrap, TOPICS.normal, workloads.records(model, n, prefix=tag))
        spy = None
        await read_while_alive(reader, service, 1, timeout_s=plan.timeout_s)
        cpu_s, done = service.cpu_s(), reader.count  # the counted window starts
        if ctx.profile and system == "inferlane":
            spy = profile.start(service.pid, plan.run_s - 0.5, ctx.path(f"profile-{tag}.txt"))
        await read_while_alive(reader, service, n, timeout_s=plan.timeout_s, run_s=plan.run_s)
        cpu_s, done = service.cpu_s() - cpu_s, reader.count - done
        if spy is not None:
            spy.wait(timeout=30)
            summary = profile.top(ctx.path(f"profile-{tag}.txt"))
            ctx.path(f"profile-{tag}-top.txt").write_text(summary)
            ctx.say(f"  profile: {ctx.path(f'profile-{tag}-top.txt')}")
        assert service.rss is not None
        peak = service.rss.peak_mb
    rate, counted, seconds = window_rate(reader.arrivals)
    lat = Latency.of(latencies(parse(reader.values())))
    ctx.say(
        f"  {tag}: {rate:,.1f}/s over {seconds:.1f}s ({counted} results), "
        f"p50 {lat.p50_ms:.1f} ms, p99 {lat.p99_ms:.1f} ms, peak RSS {peak:.0f} MiB"
    )
    extra = {
        "backlog": n,
        "all_done": reader.count >= n,
        # Steadier than the rate on a shared machine: other work slows it, not this.
        "cpu_us_per_request": cpu_s / done * 1e6 if done else None,
    }
    return Measured(
        "throughput",
        model,
        system,
        rate,
        lat.p50_ms,
        lat.p99_ms,
        peak,
        counted,
        seconds,
        SERVER,
        extra,
    )


def run(ctx: Context, model: str, system: str) -> Measured:
    return asyncio.run(measure(ctx, model, system))
