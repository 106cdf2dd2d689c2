"""``python -m bench.generative [--requests N] [--rounds 3] [--out DIR] [--quick]``:
generated tokens per second of one causal LM, four ways, side by side, on the same
requests.

The model is a Llama with random weights and the demo model's BPE tokenizer
(``worker.demo.generative_model``), the smallest of ``SIZES`` whose decoding step at
batch 1 (one token's forward pass with a KV cache) takes at least 5 ms here; it is
built once into the out folder. Its end-of-sequence id is one past the vocabulary, so
greedy decoding never ends a sequence early: every request generates exactly its
``max_new_tokens`` in every system (checked). The requests (seeded): prompts of 8-256
tokens cut from license text, 8-256 new tokens each.

Per round: ``one_at_a_time``, ``generate()`` per request; ``padded_8``, ``generate()``
on left-padded batches of 8 in request order (each batch runs to its longest request;
only each request's own tokens count); ``engine``, inferlane's engine
(``worker.execution.generative``) on the requests, no Kafka or SQL, decoding on every
torch thread (``--torch-threads``: the three baselines' count); ``inferlane``, a
fresh embedded broker and ``inferlane run`` serving only this model into SQLite (its
engine on the registry's default: one torch thread fewer than the worker's): after
one warm-up request, every request is published to the normal topic, and the time runs
from the first publish to the last final result read (chunks and results on the
results topic); the SQL rows and the CPU seconds each process used meanwhile are
counted too. Rates are generated tokens over wall seconds; the ratios of inferlane
to each other system are given per round, and as the median and range over rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson
import psutil
import torch
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from bench.kafka_io import TOPICS, ResultsReader, publish
from bench.procs import inferlane_command
from bench.scenarios.common import on_fresh_broker
from bench.workloads import Record
from consumers.contract import Priority
from worker.base.generation import Sampling
from worker.demo.generative_model import (
    CHAT_TEMPLATE,
    END,
    NAME,
    _tokenizer,
    corpus,
    generative_entry,
)
from worker.execution.generative.runtime import engine_of
from worker.execution.generative.sequences import Job
from worker.models import ModelRegistry
from worker.models.generative import kv_bytes_per_token
from worker.models.generative_model import GenerativeModel
from worker.settings import SchedulingConfig

SIZES = ((512, 4), (640, 6), (768, 8))  # (hidden, layers), smallest first
MIN_STEP_MS = 5.0
BATCH = 8
PROMPT_TOKENS = (8, 256)
NEW_TOKENS = (8, 256)
PAGE_TOKENS = 32  # the registry's default page_size
SEED = 2024
SYSTEMS = ("one_at_a_time", "padded_8", "engine", "inferlane")
RATIOS = {s: f"inferlane / {s}" for s in ("padded_8", "one_at_a_time", "engine")}
console = Console()


@dataclass(frozen=True)
class Request:
    request_id: str
    prompt: str
    prompt_ids: tuple[int, ...]
    max_new_tokens: int


@dataclass(frozen=True)
class Run:
    system: str
    tokens: int
    seconds: float
    same_tokens: int  # requests whose tokens equal one_at_a_time's

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds


Tokens = dict[str, list[int]]
Tick = Callable[[int], None]


# -- the model ---------------------------------------------------------------------------


def write_model(folder: Path, hidden: int, layers: int) -> None:
    """A random Llama of this size with the demo tokenizer, saved into ``folder``."""
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tokenizer = _tokenizer(corpus())
    vocab, end = tokenizer.get_vocab_size(), tokenizer.token_to_id(END)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        bos_token_id=end,
        eos_token_id=vocab,  # never produced: every sequence runs to max_new_tokens
        pad_token_id=end,
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = vocab
    model.generation_config.pad_token_id = end
    model.save_pretrained(folder)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token=END, pad_token=END, bos_token=END
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)


def ensure_model(cache: Path, hidden: int, layers: int) -> Path:
    folder = cache / f"llama-h{hidden}-l{layers}"
    if not (folder / "model.safetensors").exists():
        building = cache / f".{folder.name}.{os.getpid()}.tmp"
        shutil.rmtree(building, ignore_errors=True)
        write_model(building, hidden, layers)
        shutil.rmtree(folder, ignore_errors=True)
        building.rename(folder)
    return folder


def step_ms(lm: Any, steps: int = 40) -> float:
    """Median time of one decoding step at batch 1 (one token, KV cache of ~64)."""
    times = []
    with torch.inference_mode():
        out = lm(input_ids=torch.arange(1, 33).unsqueeze(0), use_cache=True)
        for _ in range(steps):
            token = out.logits[:, -1:].argmax(-1)
            start = time.perf_counter()
            out = lm(input_ids=token, past_key_values=out.past_key_values, use_cache=True)
            times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times[5:])


def choose_model(cache: Path) -> tuple[Path, dict[str, Any]]:
    """The smallest size whose step at batch 1 takes ``MIN_STEP_MS`` (else the largest)."""
    from transformers import AutoModelForCausalLM

    for hidden, layers in SIZES:
        folder = ensure_model(cache, hidden, layers)
        lm = AutoModelForCausalLM.from_pretrained(
            folder, local_files_only=True, attn_implementation="sdpa"
        ).eval()
        ms = step_ms(lm)
        params = sum(p.numel() for p in lm.parameters())
        console.print(f"llama h{hidden} l{layers} ({params / 1e6:.1f}M): {ms:.2f} ms a step")
        if ms >= MIN_STEP_MS or (hidden, layers) == SIZES[-1]:
            info = {"hidden": hidden, "layers": layers, "params": params, "step_ms_batch1": ms}
            return folder, info
    raise AssertionError("unreachable")


def write_registry(
    folder: Path, n_requests: int, kv_tokens: int | None = None, torch_threads: int | None = None
) -> Path:
    """The demo's registry entry for this model, with room for 256 new tokens and a KV
    cache that holds every request at once (or ``kv_tokens`` tokens); the engine on
    ``torch_threads`` threads (None: the worker's default)."""
    from transformers import AutoConfig

    per_token = kv_bytes_per_token(AutoConfig.from_pretrained(folder), torch.float32)
    longest = PROMPT_TOKENS[1] + NEW_TOKENS[1] + PAGE_TOKENS  # a partly filled last page
    text = generative_entry(folder.name)
    text = re.sub(r"^max_new_tokens = \d+", f"max_new_tokens = {NEW_TOKENS[1]}", text, flags=re.M)
    kv = per_token * (kv_tokens or longest * (n_requests + 1))
    text = re.sub(r"^kv_cache_bytes = .*$", f"kv_cache_bytes = {kv}", text, flags=re.M)
    if torch_threads is not None:
        text += f"torch_threads = {torch_threads}\n"
    threads = f"-t{torch_threads}" if torch_threads else ""
    registry = folder.with_name(f"registry-{folder.name}-{kv}{threads}.toml")
    registry.write_text(text)
    return registry


# -- the requests ------------------------------------------------------------------------


def make_requests(model: GenerativeModel, n: int) -> list[Request]:
    """``n`` seeded requests: a run of license text's tokens as the prompt (its length
    checked as the worker tokenizes it), and a number of new tokens."""
    adapter = model.generative_adapter
    ids = adapter.tokenizer("\n".join(corpus()))["input_ids"]
    rng = random.Random(SEED)
    out: list[Request] = []
    while len(out) < n:
        length = rng.randint(*PROMPT_TOKENS)
        start = rng.randrange(len(ids) - length)
        prompt = str(adapter.tokenizer.decode(ids[start : start + length]))
        new = rng.randint(*NEW_TOKENS)
        item = adapter.prepare({"prompt": prompt, "max_new_tokens": new})
        if PROMPT_TOKENS[0] <= len(item.prompt_ids) <= PROMPT_TOKENS[1]:
            out.append(Request(f"g{len(out)}", prompt, item.prompt_ids, new))
    return out


def record(r: Request, request_id: str) -> Record:
    inputs = {"prompt": r.prompt, "max_new_tokens": r.max_new_tokens, "return_tokens": True}
    body = {"request_id": request_id, "model": NAME, "inputs": inputs}
    return request_id.encode(), orjson.dumps(body)


# -- the systems -------------------------------------------------------------------------


def one_at_a_time(lm: Any, requests: list[Request], pad: int, tick: Tick) -> Tokens:
    out: Tokens = {}
    with torch.inference_mode():
        for r in requests:
            ids = torch.tensor([r.prompt_ids])
            gen = lm.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                do_sample=False,
                max_new_tokens=r.max_new_tokens,
                pad_token_id=pad,
            )
            out[r.request_id] = gen[0, len(r.prompt_ids) :].tolist()
            tick(1)
    return out


def padded(lm: Any, requests: list[Request], pad: int, tick: Tick) -> Tokens:
    """Left-padded batches of ``BATCH``; each request keeps its own tokens only."""
    out: Tokens = {}
    with torch.inference_mode():
        for i in range(0, len(requests), BATCH):
            batch = requests[i : i + BATCH]
            width = max(len(r.prompt_ids) for r in batch)
            ids = torch.full((len(batch), width), pad)
            mask = torch.zeros_like(ids)
            for row, r in enumerate(batch):
                ids[row, width - len(r.prompt_ids) :] = torch.tensor(r.prompt_ids)
                mask[row, width - len(r.prompt_ids) :] = 1
            gen = lm.generate(
                ids,
                attention_mask=mask,
                do_sample=False,
                max_new_tokens=max(r.max_new_tokens for r in batch),
                pad_token_id=pad,
            )
            for row, r in enumerate(batch):
                out[r.request_id] = gen[row, width : width + r.max_new_tokens].tolist()
            tick(len(batch))
    return out


def on_engine(model: GenerativeModel, requests: list[Request], tick: Tick) -> Tokens:
    """The requests on inferlane's engine, all at once on the normal lane."""
    engine = engine_of(model, lambda _bytes: None, SchedulingConfig().lane_shares())
    jobs = [
        Job(r.request_id, Priority.NORMAL, r.prompt_ids, Sampling(r.max_new_tokens))
        for r in requests
    ]
    finished = engine.run_blocking(jobs)
    tick(len(finished))
    return {f.request_id: list(f.token_ids) for f in finished}


class _Finals:
    """The final results (and how many chunks) among what a reader brought."""

    def __init__(self, reader: ResultsReader, tick: Tick) -> None:
        self.reader = reader
        self.tick = tick
        self.results: dict[str, dict[str, Any]] = {}
        self.at: dict[str, float] = {}  # request id: when its result was read (monotonic)
        self.chunks = 0
        self._scanned = 0

    def scan(self) -> None:
        for arrival in self.reader.arrivals[self._scanned :]:
            for value in arrival.values:
                body = orjson.loads(value)
                if body.get("kind") == "chunk":
                    self.chunks += 1
                elif body["request_id"] not in self.results:
                    self.results[body["request_id"]] = body
                    self.at[body["request_id"]] = arrival.mono_s
                    self.tick(1)
        self._scanned = len(self.reader.arrivals)


def sql_rows(db: Path, n: int, timeout_s: float = 15.0) -> int:
    """Rows of the ``generations`` table once it holds ``n`` (or at the timeout)."""
    from sqlalchemy import text

    from storage import make_engine

    engine = make_engine(f"sqlite:///{db}")
    deadline, count = time.monotonic() + timeout_s, 0
    try:
        while count < n and time.monotonic() < deadline:
            with engine.connect() as conn:
                count = conn.execute(text("SELECT COUNT(*) FROM generations")).scalar_one()
            time.sleep(0.2)
    finally:
        engine.dispose()
    return int(count)


async def end_to_end(
    registry: Path, requests: list[Request], out: Path, tag: str, threads: int, tick: Tick
) -> tuple[Tokens, float, dict[str, Any]]:
    """A fresh broker and worker; one warm-up request, then every request. Returns
    (tokens per request, seconds from the first publish to the last result read,
    chunks read, SQL rows, and CPU seconds of the worker, broker and reader meanwhile)."""
    db = out / f"{tag}.db"
    db.unlink(missing_ok=True)

    def command(bootstrap: str) -> list[str]:
        extra = ("--models", str(registry))
        return inferlane_command(bootstrap, db, torch_threads=threads, extra=extra)

    async with on_fresh_broker(command, out / f"logs/{tag}.log") as (bootstrap, reader, service):
        seen = _Finals(reader, lambda _n: None)

        async def wait_for(ids: set[str], timeout_s: float) -> float:
            deadline = time.monotonic() + timeout_s
            while not ids <= seen.results.keys():
                service.check_alive()
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{tag}: results missing after {timeout_s:.0f} s")
                await reader.poll()
                seen.scan()
            return max(seen.at[i] for i in ids)

        warm = Request("warm-up", requests[0].prompt, requests[0].prompt_ids, 8)
        await publish(bootstrap, TOPICS.normal, [record(warm, f"{tag}-warm-up")])
        await wait_for({f"{tag}-warm-up"}, timeout_s=300)
        seen.tick, chunks = tick, seen.chunks
        ids = {f"{tag}-{r.request_id}": r for r in requests}
        cpu = _CpuSeconds(service.pid)
        start = time.monotonic()
        await publish(bootstrap, TOPICS.normal, [record(r, i) for i, r in ids.items()])
        end = await wait_for(set(ids), timeout_s=1800)
        used = cpu.since()
        rows = await asyncio.to_thread(sql_rows, db, len(requests) + 1)
    failed = [seen.results[i] for i in ids if seen.results[i].get("status") != "ok"]
    if failed:
        raise RuntimeError(f"{tag}: {len(failed)} requests failed, e.g. {failed[0]}")
    tokens = {r.request_id: seen.results[i]["outputs"]["token_ids"] for i, r in ids.items()}
    return tokens, end - start, {"chunks": seen.chunks - chunks, "sql_rows": rows, **used}


class _CpuSeconds:
    """CPU seconds used since made: by the worker, by this process's other children
    (the broker) and by this process (the results reader)."""

    def __init__(self, worker: int) -> None:
        self.worker = worker
        self.start = self._now()

    def _now(self) -> dict[str, float]:
        me = psutil.Process()
        used = {"worker_cpu_s": 0.0, "broker_cpu_s": 0.0}
        for child in me.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                times = child.cpu_times()
                name = "worker_cpu_s" if child.pid == self.worker else "broker_cpu_s"
                used[name] += times.user + times.system
        times = me.cpu_times()
        return {**used, "bench_cpu_s": times.user + times.system}

    def since(self) -> dict[str, float]:
        now = self._now()
        return {k: round(now[k] - self.start[k], 2) for k in now}


# -- a round -----------------------------------------------------------------------------


def checked(system: str, requests: list[Request], tokens: Tokens) -> int:
    """Generated tokens, each request's checked to be exactly its max_new_tokens."""
    short = [r.request_id for r in requests if len(tokens[r.request_id]) != r.max_new_tokens]
    if short:
        raise RuntimeError(f"{system}: {len(short)} requests without max_new_tokens: {short[:5]}")
    return sum(r.max_new_tokens for r in requests)


def one_round(
    index: int,
    model: GenerativeModel,
    registry: Path,
    requests: list[Request],
    out: Path,
    threads: int,
) -> tuple[list[Run], dict[str, Any]]:
    lm, pad = model.module, model.generative_adapter.tokenizer.pad_token_id
    tokens: dict[str, Tokens] = {}
    seconds: dict[str, float] = {}
    extra: dict[str, Any] = {}
    with Progress(console=console, transient=True) as progress:
        for system in SYSTEMS:
            task = progress.add_task(f"round {index}: {system}", total=len(requests))

            def tick(n: int, task: Any = task) -> None:
                progress.advance(task, n)

            start = time.monotonic()
            if system == "one_at_a_time":
                tokens[system] = one_at_a_time(lm, requests, pad, tick)
            elif system == "padded_8":
                tokens[system] = padded(lm, requests, pad, tick)
            elif system == "engine":
                tokens[system] = on_engine(model, requests, tick)
            else:
                tag = f"round{index}"
                found = asyncio.run(end_to_end(registry, requests, out, tag, threads, tick))
                tokens[system], seconds[system], extra = found
            seconds.setdefault(system, time.monotonic() - start)
    reference = tokens["one_at_a_time"]
    runs = [
        Run(
            system,
            checked(system, requests, tokens[system]),
            seconds[system],
            sum(tokens[system][r.request_id] == reference[r.request_id] for r in requests),
        )
        for system in SYSTEMS
    ]
    return runs, extra


def round_table(index: int, runs: list[Run], extra: dict[str, Any], n: int) -> Table:
    ours = next(r for r in runs if r.system == "inferlane").tokens_per_s
    table = Table(
        "system",
        "tokens",
        "seconds",
        "tokens/s",
        "inferlane / this",
        f"same tokens as one_at_a_time (of {n})",
        title=f"round {index}: inferlane sent {extra['chunks']} chunks, wrote"
        f" {extra['sql_rows']} SQL rows (warm-up included); CPU s in its window: worker"
        f" {extra['worker_cpu_s']}, broker {extra['broker_cpu_s']}, bench {extra['bench_cpu_s']}",
    )
    for r in runs:
        table.add_row(
            r.system,
            str(r.tokens),
            f"{r.seconds:.1f}",
            f"{r.tokens_per_s:.1f}",
            f"{ours / r.tokens_per_s:.2f}",
            str(r.same_tokens),
        )
    return table


# -- the command -------------------------------------------------------------------------


def spread(values: Sequence[float]) -> dict[str, Any]:
    return {
        "runs": [round(v, 3) for v in values],
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
    }


def summary_table(rates: dict[str, list[float]], ratios: dict[str, dict[str, Any]]) -> Table:
    rounds = len(rates["inferlane"])
    table = Table("", "per round", "median", "range", title=f"over {rounds} rounds")
    for system, values in rates.items():
        s = spread(values)
        per_round = ", ".join(f"{v:.1f}" for v in values)
        table.add_row(f"{system} tokens/s", per_round, f"{s['median']:.1f}", _range(s, 1))
    for name, s in ratios.items():
        per_round = ", ".join(f"{v:.2f}" for v in s["runs"])
        table.add_row(name, per_round, f"{s['median']:.2f}", _range(s, 2))
    return table


def _range(s: dict[str, Any], digits: int) -> str:
    return f"{s['min']:.{digits}f}-{s['max']:.{digits}f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.generative", description=__doc__)
    parser.add_argument("--requests", type=int, default=None, help="requests (48; --quick 16)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("bench/out/generative"))
    parser.add_argument("--quick", action="store_true", help="16 requests")
    parser.add_argument(
        "--torch-threads", type=int, default=min(2, os.cpu_count() or 1), help="every system's"
    )
    args = parser.parse_args(argv)
    n = args.requests or (16 if args.quick else 48)
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.torch_threads)

    folder, model_info = choose_model(out / "models")
    registry_path = write_registry(folder, n)
    # The baselines' engine decodes on every torch thread, its best here; the worker's on
    # its default, one fewer (the loop and Kafka clients need a core).
    baseline = write_registry(folder, n, torch_threads=args.torch_threads)
    model = ModelRegistry.from_toml(baseline).get(NAME)
    assert isinstance(model, GenerativeModel)
    requests = make_requests(model, n)
    prompts = [len(r.prompt_ids) for r in requests]
    news = [r.max_new_tokens for r in requests]
    console.print(
        f"model {folder.name}: {model_info['step_ms_batch1']:.2f} ms a decoding step at batch 1;"
        f" {n} requests, prompts {min(prompts)}-{max(prompts)} tokens,"
        f" {min(news)}-{max(news)} new ({sum(news)} in all); {args.torch_threads} torch threads"
    )
    pad = model.generative_adapter.tokenizer.pad_token_id
    on_engine(model, requests[:2], lambda _n: None)  # warm-ups: the engine, then generate()
    one_at_a_time(model.module, requests[:1], pad, lambda _n: None)

    rounds: list[dict[str, Any]] = []
    rates: dict[str, list[float]] = {s: [] for s in SYSTEMS}
    for index in range(1, args.rounds + 1):
        runs, extra = one_round(index, model, registry_path, requests, out, args.torch_threads)
        console.print(round_table(index, runs, extra, n))
        for r in runs:
            rates[r.system].append(r.tokens_per_s)
        rounds.append({"runs": [{**asdict(r), "tokens_per_s": r.tokens_per_s} for r in runs]})
        rounds[-1].update(extra)
    ratios = {
        name: spread([a / b for a, b in zip(rates["inferlane"], rates[other], strict=True)])
        for other, name in RATIOS.items()
    }
    console.print(summary_table(rates, ratios))
    report = {
        "model": {"folder": folder.name, **model_info},
        "torch_threads": args.torch_threads,
        "requests": {"n": n, "prompt_tokens": prompts, "max_new_tokens": news},
        "rounds": rounds,
        "tokens_per_s": {s: spread(v) for s, v in rates.items()},
        "ratios": ratios,
    }
    path = out / "generative.json"
    path.write_text(json.dumps(report, indent=2))
    console.print(f"wrote {path}")


if __name__ == "__main__":
    main()
