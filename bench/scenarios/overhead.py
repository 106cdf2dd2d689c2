"""What a worker feature costs: digits throughput with it off and on, side by side.

- ``ops``: the HTTP surface. Off: ``--http-port 0``. On: served, and a scraper reads
  /metrics and /status.json once a second each (Prometheus usually scrapes every
  15 s), so the comparison includes rendering both.
- ``drift``: drift windows and references (``INFERLANE_DRIFT__ENABLED``), with the HTTP
  surface off on both sides.

Runs come in ``plan.overhead_pairs`` pairs (quick 3, full 5), off and on back to back,
the order alternating (off-on, on-off, ...) so that a drift in machine load weighs on
both sides alike. The overhead is the **median of the pairs' on/off ratios**, with
their min and max: one pair hit by a burst of other work on the machine moves the
spread, not the figure. Each side's throughput is the median of its runs. Beside it,
the same median for the worker's CPU time per request (on over off), which other work
on a shared machine disturbs far less than the rate.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import statistics
import urllib.request

from bench.scenarios import throughput
from bench.scenarios.common import Context, Measured, median_run, worker_env
from worker.intake.broker import free_port

MODEL = "digits"
SCRAPE_PATHS = ("/metrics", "/status.json")
FEATURES = ("ops", "drift")


def _get(url: str) -> None:
    with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=5) as resp:
        resp.read()


async def _scrape(port: int, stop: asyncio.Event) -> int:
    scrapes = 0
    while not stop.is_set():
        for path in SCRAPE_PATHS:
            await asyncio.to_thread(_get, f"http://127.0.0.1:{port}{path}")
            scrapes += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 1.0)
    return scrapes


async def _one(ctx: Context, feature: str, on: bool) -> Measured:
    scraped = feature == "ops" and on
    port = free_port() if scraped else 0
    run_ctx = dataclasses.replace(ctx, worker_args=(*ctx.worker_args, "--http-port", str(port)))
    drift = "false" if feature == "drift" and not on else None
    with worker_env(INFERLANE_DRIFT__ENABLED=drift):
        if not scraped:
            return await throughput.measure(run_ctx, MODEL, "inferlane")
        stop = asyncio.Event()
        scraper = asyncio.create_task(_scrape(port, stop))
        try:
            measured = await throughput.measure(run_ctx, MODEL, "inferlane")
        finally:
            stop.set()
            scrapes = await scraper
    measured.extra["scrapes"] = scrapes
    return measured


def run(ctx: Context, feature: str) -> list[Measured]:
    off: list[Measured] = []
    on: list[Measured] = []
    for k in range(ctx.plan.overhead_pairs):
        order = (False, True) if k % 2 == 0 else (True, False)
        pair = {is_on: asyncio.run(_one(ctx, feature, is_on)) for is_on in order}
        off.append(pair[False])
        on.append(pair[True])
    ratios = [b.throughput_rps / a.throughput_rps for a, b in zip(off, on, strict=True)]
    cpu = [_cpu_ratio(a, b) for a, b in zip(off, on, strict=True)]
    median = statistics.median(ratios)
    ctx.say(
        f"  {feature} on over off: median {median:.3f} of {len(ratios)} pairs "
        f"(min {min(ratios):.3f}, max {max(ratios):.3f}; overhead {1 - median:+.1%}); "
        f"CPU per request on over off: median {_fmt(cpu)}"
    )
    return [
        median_run(off, f"inferlane-{feature}-off"),
        median_run(
            on,
            f"inferlane-{feature}-on",
            pair_ratios=[round(r, 4) for r in ratios],
            pair_cpu_ratios=[None if r is None else round(r, 4) for r in cpu],
        ),
    ]


def _cpu_ratio(off: Measured, on: Measured) -> float | None:
    a, b = off.extra.get("cpu_us_per_request"), on.extra.get("cpu_us_per_request")
    return b / a if a and b else None


def _fmt(ratios: list[float | None]) -> str:
    known = [r for r in ratios if r is not None]
    if not known:
        return "-"
    return f"{statistics.median(known):.3f} (min {min(known):.3f}, max {max(known):.3f})"
