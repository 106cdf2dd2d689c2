"""Priority: sparse `high` digits requests while a `low` backlog saturates the worker.

Per backlog model (the plan's models: a digits backlog, then a minilm one), the same
worker twice, on fresh brokers: with its lanes, and with ``--single-lane`` (one FIFO
lane, the baseline). The backlog on the low topic keeps the worker busy; once its first
result is out, the worker runs ``priority_warm_s`` unmeasured (its batch controller
climbs from its start cap there). Then `high` digits requests are sent at a fixed rate
in ``priority_bursts`` bursts, each stamped with its send time, and the low lane runs
alone for ``priority_solo_s`` before the first burst, between each two and after the
last. High latency is end to end: send -> result read from the results topic. The low
lane's throughput during a burst (first high sent -> last high answered) is set beside
the mean of its rates alone just before and just after that burst, in the same worker:
the neighbouring windows share the machine's state of the moment, so a drift of the
rate over the run does not pass for the high requests' cost. The figure is the median
of the bursts' ratios; beside it, the backlog's rate during the bursts over the model's
throughput scenario (another worker, minutes earlier).
"""

from __future__ import annotations

import asyncio
import operator
import statistics
import time
from itertools import pairwise
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer

from bench import workloads
from bench.kafka_io import TOPICS, ResultsReader, publish
from bench.measure import Arrival, Latency, window_rate
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

MODEL = "digits"  # the high requests' model
HIGH = "HIPRI"  # request id prefix of the high requests; absent from every other id


def build_high() -> None:
    """Build the high requests' inputs ahead of the measured windows: in a first burst,
    loading their data set (scikit-learn's) took the harness 1.8 s of CPU beside the
    worker."""
    workloads.request_dict(MODEL, 0, prefix=HIGH)


async def send_high(bootstrap: str, rate_hz: float, seconds: float, first: int = 0) -> int:
    """``rate_hz`` high requests per second for ``seconds``, numbered from ``first``."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    await producer.start()
    try:
        n, started = int(rate_hz * seconds), time.monotonic()
        for i in range(n):
            await asyncio.sleep(max(0.0, started + i / rate_hz - time.monotonic()))
            key, value = workloads.timed_record(MODEL, first + i, prefix=HIGH)
            await producer.send(TOPICS.high, value, key=key)
        await producer.flush()
        return n
    finally:
        await producer.stop()


async def read_high(reader: ResultsReader, service: Service, n: int, timeout_s: float) -> None:
    deadline, marker = time.monotonic() + timeout_s, HIGH.encode() + b"-"
    seen, scanned = 0, len(reader.arrivals)
    while seen < n and time.monotonic() < deadline:
        service.check_alive()
        await reader.poll()
        for arrival in reader.arrivals[scanned:]:  # only what is new: the CPU is shared
            seen += sum(marker in v for v in arrival.values)
        scanned = len(reader.arrivals)


def high_latencies(reader: ResultsReader) -> list[tuple[float, float, float, float]]:
    """(sent at, wall s; end-to-end latency, ms; in-worker latency, ms; sent -> result
    produced, ms: the result's Kafka timestamp, without the harness's own read) per high
    request, first result only."""
    seen: dict[str, tuple[float, float, float, float]] = {}
    marker = HIGH.encode() + b"-"
    for arrival in reader.arrivals:
        for value, stamp_ms in zip(arrival.values, arrival.stamps_ms, strict=True):
            if marker in value:
                r = orjson.loads(value)
                sent = float(r["metadata"]["sent_at"])
                server = float(r["latency_ms"]["total"])
                produced = stamp_ms - sent * 1000
                seen.setdefault(
                    r["request_id"], (sent, (arrival.wall_s - sent) * 1000, server, produced)
                )
    return sorted(seen.values())


def low_rate(reader: ResultsReader, start_wall_s: float, end_wall_s: float) -> float:
    """Backlog results per second between the two wall-clock times, from the first fetch
    in that window that brought backlog results to the last (``window_rate``): results
    come in chunks of a batch, and a chunk counted whole or not at all at either edge
    of a few-second window moved the rate by several percent."""
    marker = HIGH.encode() + b"-"
    low = [
        Arrival(a.mono_s, a.wall_s, [v for v in a.values if marker not in v])
        for a in reader.arrivals
        if start_wall_s <= a.wall_s <= end_wall_s
    ]
    return window_rate(low)[0]


async def _alone(reader: ResultsReader, service: Service, seconds: float) -> float:
    """The low lane's rate over the next ``seconds``, with nothing else sent."""
    start = time.time()
    await read_for(reader, service, seconds)
    return low_rate(reader, start, time.time())


def backlog_for(ctx: Context, model: str, rate_rps: float | None) -> int:
    """A low backlog that outlasts the high requests: the plan's size, or more when this
    run measured the worker faster (1.5x its rate over the warm-up, both windows and
    start-up)."""
    plan = ctx.plan
    base = plan.priority_low if model == MODEL else plan.backlog[model]
    if not rate_rps:
        return base
    solo_s = plan.priority_solo_s * (plan.priority_bursts + 1)
    seconds = plan.priority_warm_s + solo_s + plan.priority_s + 4
    return max(base, int(1.5 * rate_rps * seconds))


async def measure(ctx: Context, model: str, single_lane: bool, low: int) -> Measured:
    plan = ctx.plan
    system = "inferlane-single-lane" if single_lane else "inferlane-lanes"
    db = ctx.path(f"priority-{model}-{system}.db")
    db.unlink(missing_ok=True)
    command = inferlane(ctx, db, baseline="single-lane" if single_lane else None)
    log = ctx.path(f"logs/priority-{model}-{system}.log")
    async with on_fresh_broker(command, log) as (bootstrap, reader, service):
        await publish(bootstrap, TOPICS.low, workloads.records(model, low, prefix="bulk"))
        build_high()
        await read_while_alive(reader, service, 1, timeout_s=plan.timeout_s)
        await read_for(reader, service, plan.priority_warm_s)
        alone = [await _alone(reader, service, plan.priority_solo_s)]
        bursts: list[tuple[float, float]] = []  # wall clock: first high sent, last answered
        burst_s, n_high = plan.priority_s / plan.priority_bursts, 0
        for _ in range(plan.priority_bursts):
            start = time.time()
            sender = asyncio.create_task(
                send_high(bootstrap, plan.priority_rate_hz, burst_s, first=n_high)
            )
            n = int(plan.priority_rate_hz * burst_s)
            await read_high(reader, service, n, burst_s + plan.timeout_s)
            await sender
            bursts.append((start, time.time()))
            n_high += n
            alone.append(await _alone(reader, service, plan.priority_solo_s))
        assert service.rss is not None
        peak = service.rss.peak_mb
    series = high_latencies(reader)
    lat = Latency.of([ms for _, ms, _, _ in series])
    in_worker = Latency.of([ms for _, _, ms, _ in series])
    produced = Latency.of([ms for _, _, _, ms in series])
    rate, counted, seconds = window_rate(reader.arrivals)
    low_done = reader.count - len(series)
    first = series[0][0] if series else 0.0
    during = [low_rate(reader, start, end) for start, end in bursts]
    ratios = [r / ((a + b) / 2) for r, (a, b) in zip(during, pairwise(alone), strict=True) if a + b]
    judged = statistics.median(ratios) if ratios else None
    burst_s_each = [end - start for start, end in bursts]
    extra_out: dict[str, Any] = {
        "backlog_model": model,
        "low_rps_solo": statistics.mean(alone),
        "low_rps_alone": alone,  # before the first burst, between bursts, after the last
        "low_rps_bursts": during,
        "low_over_solo_bursts": ratios,
        "low_over_solo": judged,
        # Results over seconds, all bursts together: rate x length gives each one's count.
        "low_rps_while_high": sum(map(operator.mul, during, burst_s_each)) / sum(burst_s_each),
        "high_requests": n_high,
        "high_answered": len(series),
        "high_rate_hz": plan.priority_rate_hz,
        "low_backlog": low,
        "low_done_at_end": low_done,
        "saturated": low_done < low,  # the backlog outlasted the high requests
        "reader_repeats": reader.repeats,  # results a reset of the reader brought again
        "reader_skipped": reader.skipped,
        "server_p50_ms": in_worker.p50_ms,
        "server_p99_ms": in_worker.p99_ms,
        "produced_p50_ms": produced.p50_ms,
        "produced_p99_ms": produced.p99_ms,
        "series": [(round(t - first, 3), round(ms, 2)) for t, ms, _, _ in series],
    }
    ctx.say(
        f"  priority, {model} backlog, {system}: "
        f"high p50 {lat.p50_ms:.1f} ms, p99 {lat.p99_ms:.1f} ms "
        f"({len(series)}/{n_high} answered; result produced p50 {produced.p50_ms:.1f} ms, "
        f"p99 {produced.p99_ms:.1f} ms; in the worker p50 {in_worker.p50_ms:.1f} ms, "
        f"p99 {in_worker.p99_ms:.1f} ms); low lane "
        f"{', '.join(f'{r:,.0f}' for r in during)}/s in the bursts, "
        f"{', '.join(f'{r:,.0f}' for r in alone)}/s alone around them: "
        f"{'-' if judged is None else f'{judged:.3f}'} of its solo rate (median); "
        f"saturated={extra_out['saturated']}"
        + (
            f"; the reader's position was reset: {reader.repeats:,} results read again "
            f"(counted once), {reader.skipped:,} offsets skipped"
            if reader.repeats or reader.skipped
            else ""
        )
    )
    return Measured(
        "priority",
        model,
        system,
        rate,
        lat.p50_ms,
        lat.p99_ms,
        peak,
        counted,
        seconds,
        END_TO_END,
        extra_out,
    )


def run(ctx: Context, rates_rps: dict[str, float]) -> list[Measured]:
    """Per backlog model, lanes then one FIFO lane; ``rates_rps``: inferlane's rate per
    model measured earlier in the run (sizes the backlog)."""
    out = []
    for model in ctx.plan.models:
        low = backlog_for(ctx, model, rates_rps.get(model))
        out += [asyncio.run(measure(ctx, model, lanes, low)) for lanes in (False, True)]
    return out
