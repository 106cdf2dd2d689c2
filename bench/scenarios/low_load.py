"""Low load: a trickle of requests to an idle worker; end-to-end p50 and p99.

One worker serves every model; a request per model first warms it (group joined,
model loaded). Then each model gets ``rate_hz`` requests per second for ``low_load_s``,
each stamped with its send time; latency is send -> result read from the results topic.
"""

from __future__ import annotations

import asyncio
import time

import orjson
from aiokafka import AIOKafkaProducer

from bench import workloads
from bench.kafka_io import TOPICS, ResultsReader
from bench.measure import Latency
from bench.scenarios.common import (
    END_TO_END,
    Context,
    Measured,
    inferlane,
    on_fresh_broker,
    read_while_alive,
)


async def _trickle(
    producer: AIOKafkaProducer, model: str, prefix: str, rate_hz: float, seconds: float
) -> int:
    n, started = max(1, int(rate_hz * seconds)), time.monotonic()
    for i in range(n):
        await asyncio.sleep(max(0.0, started + i / rate_hz - time.monotonic()))
        key, value = workloads.timed_record(model, i, prefix=prefix)
        await producer.send(TOPICS.normal, value, key=key)
    return n


def _latencies(reader: ResultsReader, prefix: str) -> tuple[list[float], list[float]]:
    """End-to-end and server-side (receipt -> result ready) latencies, ms."""
    marker = f'"{prefix}-'.encode()
    out: dict[str, tuple[float, float]] = {}
    for arrival in reader.arrivals:
        for value in arrival.values:
            if marker in value:
                r = orjson.loads(value)
                sent = float(r["metadata"]["sent_at"])
                e2e = (arrival.wall_s - sent) * 1000
                out.setdefault(r["request_id"], (e2e, float(r["latency_ms"]["total"])))
    return [e for e, _ in out.values()], [s for _, s in out.values()]


async def measure(ctx: Context) -> list[Measured]:
    plan = ctx.plan
    db = ctx.path("low-load.db")
    db.unlink(missing_ok=True)
    measured = []
    system = on_fresh_broker(inferlane(ctx, db), ctx.path("logs/low-load.log"))
    async with system as (bootstrap, reader, service):
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
        await producer.start()
        try:
            for i, model in enumerate(plan.models):  # warm-up: join, load each model
                await _trickle(producer, model, f"warm-{model}", 1, 1)
                await read_while_alive(reader, service, i + 1, timeout_s=plan.timeout_s)
            for model in plan.models:
                rate, prefix = plan.low_load_rate_hz[model], f"trickle-{model}"
                started, before = time.monotonic(), reader.count
                n = max(1, int(rate * plan.low_load_s))
                # Read while sending: a result must be timed when it arrives.
                sending = asyncio.create_task(
                    _trickle(producer, model, prefix, rate, plan.low_load_s)
                )
                await read_while_alive(
                    reader, service, before + n, timeout_s=plan.low_load_s + plan.timeout_s
                )
                await sending
                e2e, server = _latencies(reader, prefix)
                lat, in_worker = Latency.of(e2e), Latency.of(server)
                assert service.rss is not None
                measured.append(
                    Measured(
                        "low_load",
                        model,
                        "inferlane",
                        n / (time.monotonic() - started),
                        lat.p50_ms,
                        lat.p99_ms,
                        service.rss.peak_mb,
                        lat.samples,
                        time.monotonic() - started,
                        END_TO_END,
                        {
                            "rate_hz": rate,
                            "server_p50_ms": in_worker.p50_ms,
                            "server_p99_ms": in_worker.p99_ms,
                        },
                    )
                )
                ctx.say(
                    f"  low load {model} at {rate:g}/s: p50 {lat.p50_ms:.1f} ms, "
                    f"p99 {lat.p99_ms:.1f} ms ({lat.samples} requests); in the "
                    f"worker p50 {in_worker.p50_ms:.1f} ms, p99 {in_worker.p99_ms:.1f}"
                )
        finally:
            await producer.stop()
    return measured


def run(ctx: Context) -> list[Measured]:
    return asyncio.run(measure(ctx))
