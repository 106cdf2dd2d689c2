"""``python -m bench.generative_lanes [--out DIR] [--quick]``: a generative model's lanes
through Kafka, two parts, each on a fresh embedded broker and ``inferlane run``.

The model and its requests are ``bench.generative``'s (a random Llama whose decoding
step at batch 1 takes at least 5 ms here; greedy, every request generates exactly its
``max_new_tokens``).

``priority``: time to first token of lone high requests (prompts of 8-64 tokens, 16 new
tokens, one at a time at gaps of 100-300 ms), from the publish to the first chunk read
on the results topic: first on the idle worker, then beside a low-lane backlog of long
generations (256 new tokens each, more than the run outlasts). The backlog's generated
tokens per second (counted from its chunks' ``tokens``) alone for ``solo_s`` before and
after the high requests, and during them. Judged: high p99 under the backlog at most
2 x its idle p99 + one decoding step, read two ways: a step at batch 1, and the step a
high request may find in flight (every backlog sequence in it: the backlog's size over
its tokens/s alone); the backlog during the high requests at least 0.8 of its rate
alone (the mean of before and after).

``memory``: a KV cache that holds a quarter of the tokens a low backlog needs at once;
the backlog, then high requests beside it (their prompts find no free blocks and
preempt low sequences). Judged: some low sequences were preempted (the worker's
``inferlane_generation_preempted_total``); every request ends ``ok``; each one's tokens
equal the engine's with a cache for every request (in this process, no Kafka); the
worker's peak RSS at most 1.2 x (its RSS after one short request, with the model loaded
and its engine made, + the KV budget). Beside them, from the priority part's worker: the
mean decoding step and the mean delay from a first token to its chunk's acknowledgement.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import torch
from aiokafka import AIOKafkaProducer
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.table import Table
from transformers import AutoConfig

from bench.generative import (
    NAME,
    NEW_TOKENS,
    Request,
    choose_model,
    make_requests,
    on_engine,
    record,
    write_registry,
)
from bench.kafka_io import TOPICS, ResultsReader, producer
from bench.procs import Service, inferlane_command
from bench.scenarios.common import on_fresh_broker
from worker.intake.broker import free_port
from worker.models import ModelRegistry
from worker.models.generative import kv_bytes_per_token
from worker.models.generative_model import GenerativeModel

HIGH_PROMPT = (8, 64)
HIGH_NEW = 16
GAP_S = (0.1, 0.3)
console = Console()


@dataclass(frozen=True)
class Plan:
    high: int  # high requests per phase
    low: int  # the priority part's backlog
    warm_s: float  # the backlog runs unmeasured first (the engine fills)
    solo_s: float
    memory_low: int  # the memory part's backlog (the cache holds a quarter of it)
    memory_high: int


FULL = Plan(high=40, low=192, warm_s=8, solo_s=12, memory_low=32, memory_high=8)
QUICK = Plan(high=15, low=48, warm_s=5, solo_s=6, memory_low=16, memory_high=4)


@dataclass
class Seen:
    """What the results topic brought: per request, when its first chunk was read and
    its final result; per arrival, the tokens each lane's chunks added."""

    reader: ResultsReader
    first_chunk_s: dict[str, float] = field(default_factory=dict)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    added: list[tuple[float, str, int]] = field(default_factory=list)  # (mono s, id, tokens)
    _tokens: dict[str, int] = field(default_factory=dict)
    _scanned: int = 0

    def scan(self) -> None:
        for arrival in self.reader.arrivals[self._scanned :]:
            for value in arrival.values:
                body = orjson.loads(value)
                rid = body["request_id"]
                if body.get("kind") != "chunk":
                    self.results.setdefault(rid, body)
                    continue
                self.first_chunk_s.setdefault(rid, arrival.mono_s)
                grown = body["tokens"] - self._tokens.get(rid, 0)
                if grown > 0:
                    self._tokens[rid] = body["tokens"]
                    self.added.append((arrival.mono_s, rid, grown))
        self._scanned = len(self.reader.arrivals)

    def rate(self, prefix: str, start_s: float, end_s: float) -> float:
        """Tokens per second that requests named ``prefix...`` added in the window."""
        n = sum(k for t, rid, k in self.added if start_s <= t < end_s and rid.startswith(prefix))
        return n / (end_s - start_s)


class Harness:
    """A producer and a task reading the results topic for the block's duration."""

    def __init__(self, bootstrap: str, reader: ResultsReader, service: Service) -> None:
        self.seen = Seen(reader)
        self.service = service
        self._producer: AIOKafkaProducer = producer(bootstrap)
        self._reading: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Harness:
        await self._producer.start()
        self._reading = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *_exc: object) -> None:
        if self._reading is not None:
            self._reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reading
        await self._producer.stop()

    async def _read(self) -> None:
        while True:
            await self.seen.reader.poll(timeout_ms=10)
            self.seen.scan()

    async def send(self, topic: str, records: Sequence[tuple[bytes, bytes]]) -> float:
        """Publish, acknowledged; returns when the first one was handed over."""
        start = time.monotonic()
        sent = [await self._producer.send(topic, value, key=key) for key, value in records]
        await asyncio.gather(*sent)
        return start

    async def wait(self, ids: set[str], timeout_s: float, *, first_chunk: bool = False) -> None:
        have = self.seen.first_chunk_s if first_chunk else self.seen.results
        deadline = time.monotonic() + timeout_s
        while not ids <= have.keys():
            self.service.check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(ids - have.keys())} of {len(ids)} missing")
            await asyncio.sleep(0.005)

    async def lone_high(self, requests: list[Request], tag: str) -> list[float]:
        """Each request alone on the high topic: its time to first chunk, in ms."""
        rng, ttft = random.Random(7), []
        for r in requests:
            rid = f"{tag}-{r.request_id}"
            sent = await self.send(TOPICS.high, [record(r, rid)])
            await self.wait({rid}, 120, first_chunk=True)
            ttft.append(1000 * (self.seen.first_chunk_s[rid] - sent))
            await asyncio.sleep(rng.uniform(*GAP_S))
        return ttft


async def warm_up(h: Harness, model: GenerativeModel) -> None:
    """One short request: the model loaded and its engine and KV cache made."""
    warm = high_requests(model, 1, seed=99)[0]
    await h.send(TOPICS.normal, [record(warm, "warm-up")])
    await h.wait({"warm-up"}, 300)


def high_requests(model: GenerativeModel, n: int, seed: int) -> list[Request]:
    """Prompts of ``HIGH_PROMPT`` tokens (the start of a bench prompt, tokenized again)."""
    adapter, rng = model.generative_adapter, random.Random(seed)
    out = []
    for i, r in enumerate(make_requests(model, n)):
        prompt = str(adapter.tokenizer.decode(list(r.prompt_ids[: rng.randint(*HIGH_PROMPT)])))
        item = adapter.prepare({"prompt": prompt, "max_new_tokens": HIGH_NEW})
        out.append(Request(f"{seed}-{i}", prompt, item.prompt_ids, HIGH_NEW))
    return out


def long_requests(model: GenerativeModel, n: int) -> list[Request]:
    return [
        Request(r.request_id, r.prompt, r.prompt_ids, NEW_TOKENS[1])
        for r in make_requests(model, n)
    ]


def p99(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def command(registry: Path, db: Path, threads: int, port: int) -> Any:
    def make(bootstrap: str) -> list[str]:
        extra = ("--models", str(registry), "--http-port", str(port))
        return inferlane_command(bootstrap, db, torch_threads=threads, extra=extra)

    return make


def engine_metrics(port: int) -> dict[str, float]:
    """The worker's generation metrics for the model: preemptions, and the mean step
    and first-chunk delay (ms)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    families = list(text_string_to_metric_families(text))
    found = {
        sample.name: sample.value
        for family in families
        for sample in family.samples
        if sample.labels.get("model") == NAME and sample.name.startswith("inferlane_generation")
    }
    # Long stalls, counted: steps over half a second, full garbage collector passes
    # over a quarter of one (and the longest full pass's bucket).
    buckets = {
        (sample.name, sample.labels.get("generation"), sample.labels.get("le")): sample.value
        for family in families
        for sample in family.samples
        if sample.name.endswith("_bucket")
        and (sample.labels.get("model") == NAME or "gc_pause" in sample.name)
    }
    steps = "inferlane_generation_step_seconds_bucket"
    gc_full = "inferlane_gc_pause_seconds_bucket"

    def mean_ms(name: str) -> float:
        return 1000 * found[f"{name}_sum"] / max(1.0, found[f"{name}_count"])

    return {
        "preempted": found["inferlane_generation_preempted_total"],
        "step_ms_mean": mean_ms("inferlane_generation_step_seconds"),
        "first_chunk_delay_ms_mean": mean_ms("inferlane_generation_first_chunk_delay_seconds"),
        "steps_over_0.5_s": buckets[(steps, None, "+Inf")] - buckets[(steps, None, "0.5")],
        "full_gc_passes": buckets[(gc_full, "2", "+Inf")],
        "full_gc_passes_over_0.25_s": buckets[(gc_full, "2", "+Inf")]
        - buckets[(gc_full, "2", "0.25")],
    }


async def priority(
    model: GenerativeModel, registry: Path, plan: Plan, out: Path, threads: int, step_ms: float
) -> dict[str, Any]:
    db = out / "priority.db"
    db.unlink(missing_ok=True)
    port = free_port()
    launch = command(registry, db, threads, port)
    async with (
        on_fresh_broker(launch, out / "logs/priority.log") as (bootstrap, reader, service),
        Harness(bootstrap, reader, service) as h,
    ):
        await warm_up(h, model)
        console.print("priority: idle high requests")
        idle = await h.lone_high(high_requests(model, plan.high, seed=1), "idle")
        backlog = long_requests(model, plan.low)
        await h.send(TOPICS.low, [record(r, f"low-{r.request_id}") for r in backlog])
        await asyncio.sleep(plan.warm_s)
        console.print("priority: the backlog alone, then with high requests, then alone")
        before_s = time.monotonic()
        await asyncio.sleep(plan.solo_s)
        during_s = time.monotonic()
        busy_requests = high_requests(model, plan.high, seed=2)
        busy = await h.lone_high(busy_requests, "busy")
        after_s = time.monotonic()
        await asyncio.sleep(plan.solo_s)
        end_s = time.monotonic()
        low_done = sum(rid.startswith("low-") for rid in h.seen.results)
        engine = engine_metrics(port)
    solo = [h.seen.rate("low-", before_s, during_s), h.seen.rate("low-", after_s, end_s)]
    during = h.seen.rate("low-", during_s, after_s)
    bound = 2 * p99(idle) + step_ms
    # The step a high request may find in flight: every backlog sequence decodes in it.
    backlog_step_ms = 1000 * plan.low / statistics.mean(solo)
    wide = 2 * p99(idle) + backlog_step_ms
    return {
        "idle_ttft_ms": {"p50": statistics.median(idle), "p99": p99(idle)},
        "busy_ttft_ms": {"p50": statistics.median(busy), "p99": p99(busy)},
        "bound_ms": bound,
        "high_p99_over_bound": p99(busy) / bound,
        "backlog_step_ms": backlog_step_ms,
        "high_p99_over_bound_backlog_step": p99(busy) / wide,
        "low_tokens_per_s": {"solo": solo, "during": during},
        "low_over_solo": during / statistics.mean(solo),
        "saturated": low_done < plan.low,
        "engine": engine,
        "failed": sum(r.get("status") != "ok" for r in h.seen.results.values()),
        # Per high request beside the backlog, in order: time to first chunk as read
        # here, and the worker's own ttft_ms (its consumer's receipt to the first token).
        "busy_each_ms": [
            (
                round(t, 1),
                h.seen.results.get(f"busy-{r.request_id}", {}).get("outputs", {}).get("ttft_ms"),
            )
            for t, r in zip(busy, busy_requests, strict=True)
        ],
    }


async def memory(
    model: GenerativeModel, registry: Path, plan: Plan, out: Path, threads: int, budget: int
) -> dict[str, Any]:
    db = out / "memory.db"
    db.unlink(missing_ok=True)
    backlog = long_requests(model, plan.memory_low)
    high = high_requests(model, plan.memory_high, seed=3)
    port = free_port()
    launch = command(registry, db, threads, port)
    async with (
        on_fresh_broker(launch, out / "logs/memory.log") as (bootstrap, reader, service),
        Harness(bootstrap, reader, service) as h,
    ):
        assert service.rss is not None
        await warm_up(h, model)
        await asyncio.sleep(1.0)  # an RSS sample or two after it
        idle_rss = max(rss for _, rss in service.rss.samples)
        await h.send(TOPICS.low, [record(r, f"low-{r.request_id}") for r in backlog])
        await asyncio.sleep(2.0)  # the cache full of low sequences
        await h.lone_high(high, "high")
        ids = {f"low-{r.request_id}" for r in backlog} | {f"high-{r.request_id}" for r in high}
        await h.wait(ids, 1800)
        peak_rss = max(rss for _, rss in service.rss.samples)
        preempted = engine_metrics(port)["preempted"]
    results = h.seen.results
    tokens = {rid: results[rid]["outputs"]["token_ids"] for rid in ids if rid in results}
    return {
        "failed": sum(results[rid].get("status") != "ok" for rid in ids),
        "tokens": tokens,
        "idle_rss_mb": idle_rss / 2**20,
        "peak_rss_mb": peak_rss / 2**20,
        "kv_budget_mb": budget / 2**20,
        "rss_over_bound": peak_rss / (1.2 * (idle_rss + budget)),
        "preempted": preempted,
        "requests": [*backlog, *high],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.generative_lanes", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("bench/out/generative_lanes"))
    parser.add_argument("--quick", action="store_true", help="fewer requests, shorter windows")
    parser.add_argument("--torch-threads", type=int, default=min(2, os.cpu_count() or 1))
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.torch_threads)

    folder, info = choose_model(out.parent / "generative" / "models")
    registry = write_registry(folder, plan.low + 2 * plan.high)
    model = ModelRegistry.from_toml(registry).get(NAME)
    assert isinstance(model, GenerativeModel)
    found = asyncio.run(
        priority(model, registry, plan, out, args.torch_threads, info["step_ms_batch1"])
    )

    backlog = long_requests(model, plan.memory_low)
    needed = sum(len(r.prompt_ids) + r.max_new_tokens for r in backlog)
    small = write_registry(folder, plan.memory_low, kv_tokens=needed // 4)
    budget = kv_bytes_per_token(AutoConfig.from_pretrained(folder), torch.float32) * (needed // 4)
    mem = asyncio.run(memory(model, small, plan, out, args.torch_threads, budget))
    reference = on_engine(model, mem.pop("requests"), lambda _n: None)
    mem["same_tokens"] = sum(
        tokens == reference[rid.split("-", 1)[1]] for rid, tokens in mem.pop("tokens").items()
    )
    mem["requests"] = plan.memory_low + plan.memory_high

    table = Table(title=f"generative lanes ({folder.name}, {info['step_ms_batch1']:.1f} ms a step)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("target")
    idle, busy = found["idle_ttft_ms"], found["busy_ttft_ms"]
    n = mem["requests"]
    rows = [
        ("high TTFT p50 / p99 idle, ms", f"{idle['p50']:.1f} / {idle['p99']:.1f}", ""),
        (
            "high TTFT p50 / p99 beside the backlog, ms",
            f"{busy['p50']:.1f} / {busy['p99']:.1f}",
            "",
        ),
        (
            "high p99 over 2 x idle p99 + a step at batch 1",
            f"{found['high_p99_over_bound']:.2f}",
            "<= 1",
        ),
        (
            "high p99 over 2 x idle p99 + a backlog step",
            f"{found['high_p99_over_bound_backlog_step']:.2f}",
            "<= 1",
        ),
        ("backlog beside high over alone", f"{found['low_over_solo']:.2f}", ">= 0.8"),
        ("backlog outlasted the run", str(found["saturated"]), "True"),
        ("memory: sequences preempted", f"{mem['preempted']:.0f}", "> 0"),
        ("memory: requests ok", f"{n - mem['failed']} of {n}", "all"),
        ("memory: tokens as with room for all", f"{mem['same_tokens']} of {n}", "all"),
        ("memory: peak RSS over 1.2 x (idle + budget)", f"{mem['rss_over_bound']:.2f}", "<= 1"),
    ]
    for row in rows:
        table.add_row(*row)
    console.print(table)
    engine = found["engine"]
    console.print(
        f"beside the backlog: decoding steps {engine['step_ms_mean']:.1f} ms, first chunks "
        f"acknowledged {engine['first_chunk_delay_ms_mean']:.1f} ms after their token (means)"
    )
    console.print(
        f"RSS idle {mem['idle_rss_mb']:.0f} MiB, peak {mem['peak_rss_mb']:.0f} MiB, "
        f"KV budget {mem['kv_budget_mb']:.1f} MiB"
    )
    path = out / "generative_lanes.json"
    path.write_text(json.dumps({"model": info, "priority": found, "memory": mem}, indent=2))
    console.print(f"wrote {path}")


if __name__ == "__main__":
    main()
