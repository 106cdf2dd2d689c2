"""The engine alone (no Kafka): generate() equality, priority at every step, preemption
that resumes the same tokens, and terminal events for stop strings and deadlines."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from pathlib import Path

import pytest
import torch
from generative_prompts import prompt
from generative_reference import generate_all, greedy_reference

from consumers.contract import Priority
from worker.base.generation import GenerationItem, Sampling
from worker.execution.generative.engine import GenerativeEngine
from worker.execution.generative.runtime import engine_of
from worker.execution.generative.sequences import Finished, Job
from worker.models import ModelRegistry
from worker.models.generative_model import GenerativeModel
from worker.settings import SchedulingConfig


def _model(registry: ModelRegistry) -> GenerativeModel:
    model = registry.get("tinylm")
    assert isinstance(model, GenerativeModel)
    return model


def _engine(registry: ModelRegistry) -> GenerativeEngine:
    return engine_of(_model(registry), lambda _bytes: None, SchedulingConfig().lane_shares())


def _prompts(registry: ModelRegistry, n: int, seed: int) -> list[GenerationItem]:
    """``n`` prompts of 4-48 tokens cut from license text, with 8-64 new tokens."""
    adapter = _model(registry).generative_adapter
    rng = random.Random(seed)
    items = []
    for _ in range(n):
        text = prompt(rng, 2, 30)
        items.append(adapter.prepare({"prompt": text, "max_new_tokens": rng.randint(8, 64)}))
    return items


async def test_greedy_tokens_equal_generate_one_at_a_time(tinylm_registry: ModelRegistry) -> None:
    items = _prompts(tinylm_registry, 30, seed=1)
    jobs = [Job(f"r{i}", Priority.NORMAL, it.prompt_ids, it.sampling) for i, it in enumerate(items)]
    done = await generate_all(_engine(tinylm_registry), jobs)
    model = _model(tinylm_registry)
    for i, item in enumerate(items):
        reference = greedy_reference(model, item)
        assert list(done[f"r{i}"].token_ids) == reference, i
        assert done[f"r{i}"].finish_reason == (
            "eos" if len(reference) < item.sampling.max_new_tokens else "length"
        )


@pytest.fixture(scope="module")
def small_kv(tinylm_registry_path: Path) -> ModelRegistry:
    """The model with a KV cache of 12 blocks of 16 tokens (192 tokens: three long
    sequences), so that sequences compete for blocks."""
    text = tinylm_registry_path.read_text()
    registry = tinylm_registry_path.with_name("small-kv.toml")
    registry.write_text(
        text.replace("kv_cache_bytes = 4194304", "kv_cache_bytes = 196608\npage_size = 16")
    )
    return ModelRegistry.from_toml(registry)


@pytest.mark.parametrize(("entry", "expected"), [("", 2), ("torch_threads = 1", 1)])
async def test_the_engine_thread_decodes_on_its_own_torch_thread_count(
    tinylm_registry_path: Path, entry: str, expected: int
) -> None:
    """By default one torch thread fewer than the process's (a core for the loop and the
    Kafka clients); the registry entry's ``torch_threads`` when set. The process keeps
    its own count."""
    registry_path = tinylm_registry_path.with_name(f"threads-{expected}.toml")
    text = tinylm_registry_path.read_text()
    registry_path.write_text(text.replace("kv_cache_bytes =", f"{entry}\nkv_cache_bytes =", 1))
    model = _model(ModelRegistry.from_toml(registry_path))
    seen: list[tuple[int, int]] = []
    hook = model.module.register_forward_pre_hook(
        lambda _m, _a: seen.append((threading.get_ident(), torch.get_num_threads()))
    )
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        engine = engine_of(model, lambda _bytes: None, SchedulingConfig().lane_shares())
        item = model.generative_adapter.prepare({"prompt": "Permission is", "max_new_tokens": 4})
        await generate_all(engine, [Job("t", Priority.NORMAL, item.prompt_ids, item.sampling)])
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)
        hook.remove()
    steps = [(thread, n) for thread, n in seen if thread != threading.get_ident()]
    assert steps and {n for _thread, n in steps} == {expected}


async def test_preempted_sequences_resume_with_the_same_tokens(
    tinylm_registry: ModelRegistry, small_kv: ModelRegistry
) -> None:
    prompt = _prompts(tinylm_registry, 1, seed=3)[0].prompt_ids[:8]
    lows = [
        Job(
            f"low{i}", Priority.LOW, prompt, Sampling(48, temperature=0.0 if i % 2 else 0.9, seed=i)
        )
        for i in range(6)
    ]
    alone = {}
    for job in lows:  # each sequence by itself: never preempted
        alone.update(await generate_all(_engine(small_kv), [job]))
    engine = _engine(small_kv)
    before = engine.clock.preempted
    crowd = asyncio.ensure_future(generate_all(engine, lows))
    while not engine.clock.steps or engine.live < len(lows):
        await asyncio.sleep(0.001)
    await asyncio.sleep(0.05)
    highs = [Job(f"high{i}", Priority.HIGH, prompt, Sampling(40)) for i in range(3)]
    high_done = await generate_all(engine, highs)
    low_done = await crowd
    assert engine.clock.preempted > before  # the high requests took blocks from low ones
    for job in lows:
        assert low_done[job.request_id].token_ids == alone[job.request_id].token_ids
    assert all(f.finish_reason in ("eos", "length") for f in high_done.values())


async def test_a_high_request_gets_its_first_token_before_the_low_backlog_ends(
    tinylm_registry: ModelRegistry,
) -> None:
    engine = _engine(tinylm_registry)
    items = _prompts(tinylm_registry, 24, seed=5)
    lows = [Job(f"bl{i}", Priority.LOW, it.prompt_ids, Sampling(64)) for i, it in enumerate(items)]
    backlog = asyncio.ensure_future(generate_all(engine, lows))
    while engine.clock.steps < 3:
        await asyncio.sleep(0.001)
    submitted = time.monotonic()
    high = (
        await generate_all(engine, [Job("urgent", Priority.HIGH, items[0].prompt_ids, Sampling(4))])
    )["urgent"]
    done = await backlog
    assert high.first_token_s is not None and high.first_token_s > submitted
    assert high.first_token_s < min(f.last_token_s or 0 for f in done.values())


async def test_a_lower_lane_owed_its_share_does_not_hold_a_high_prompt_out(
    tinylm_registry_path: Path,
) -> None:
    """Beside a high prompt a step's tokens are cut to its own and a few more; a low lane
    below its share goes first among the lanes under high only, never ahead of the high
    prompt (it would fill the cut budget, step after step, while its share is owed)."""
    registry_path = tinylm_registry_path.with_name("contended.toml")
    text = tinylm_registry_path.read_text()
    registry_path.write_text(
        text.replace(
            "kv_cache_bytes = 4194304", "kv_cache_bytes = 67108864\nmax_batch_tokens = 128"
        )
    )
    model = _model(ModelRegistry.from_toml(registry_path))
    shares = {Priority.HIGH: 0.5, Priority.NORMAL: 0.0, Priority.LOW: 0.5}
    engine = engine_of(model, lambda _bytes: None, shares)
    item = model.generative_adapter.prepare({"prompt": "Permission is hereby", "max_new_tokens": 4})
    lows = [Job(f"low{i}", Priority.LOW, item.prompt_ids, Sampling(64)) for i in range(160)]
    backlog = asyncio.ensure_future(generate_all(engine, lows))  # more than a step's tokens
    while engine.clock.steps < 20:  # every low prompt computed
        await asyncio.sleep(0.001)
    for _ in range(100):  # the shares' window all high: the low lane is owed half of it
        engine.book.shares.served(Priority.HIGH)
    submitted_at = engine.clock.steps
    first_chunk_at: list[int] = []
    loop = asyncio.get_running_loop()
    high: asyncio.Future[Finished] = loop.create_future()
    engine.submit(
        Job("urgent", Priority.HIGH, item.prompt_ids, Sampling(4)),
        lambda _i, _c, _f: first_chunk_at.append(engine.clock.steps),
        high.set_result,
    )
    assert (await high).finish_reason in ("eos", "length")
    await backlog
    # The step under way, the one with the high prompt, and at most one the engine's
    # thread began before the loop heard of the token.
    assert first_chunk_at[0] - submitted_at <= 3, (submitted_at, first_chunk_at)


async def test_stop_strings_and_deadlines_end_with_a_terminal_event(
    tinylm_registry: ModelRegistry,
) -> None:
    engine = _engine(tinylm_registry)
    prompt = (
        _model(tinylm_registry)
        .generative_adapter.prepare("Permission is hereby granted")
        .prompt_ids
    )
    loop = asyncio.get_running_loop()
    ended: dict[str, asyncio.Future[Finished]] = {
        k: loop.create_future() for k in ("stop", "late", "running")
    }

    def submit(job: Job) -> None:
        engine.submit(job, lambda _i, _c, _f: None, ended[job.request_id].set_result)

    submit(Job("stop", Priority.NORMAL, prompt, Sampling(64, stop=("charge",))))
    submit(Job("late", Priority.NORMAL, prompt, Sampling(64), deadline_s=time.monotonic() - 1))
    submit(Job("running", Priority.NORMAL, prompt, Sampling(120)))
    engine.expire("running")  # what its deadline's timer calls
    stop, late, running = [await ended[k] for k in ("stop", "late", "running")]
    assert stop.finish_reason == "stop" and "charge" not in stop.text and stop.text.endswith("of ")
    assert late.finish_reason == "expired" and late.token_ids == ()
    assert running.finish_reason == "expired" and running.generated_tokens < 120
    again = await generate_all(engine, [Job("after", Priority.NORMAL, prompt, Sampling(8))])
    assert again["after"].generated_tokens == 8  # the engine keeps serving
