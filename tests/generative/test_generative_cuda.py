"""On a GPU machine: the generative demo model (tinylm) on CUDA, its greedy tokens through
the engine equal to ``generate()`` one request at a time on the same device. Skipped
without CUDA (``-m cuda`` selects it; scripts/gpu-check.sh runs it)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from generative_prompts import prompt
from generative_reference import generate_all, greedy_reference

from consumers.contract import Priority
from worker.base.generation import GenerationItem
from worker.execution.generative.engine import GenerativeEngine
from worker.execution.generative.runtime import engine_of
from worker.execution.generative.sequences import Job
from worker.models import ModelRegistry
from worker.models.generative_model import GenerativeModel, RunnerLease
from worker.settings import SchedulingConfig

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.fixture(scope="module")
def cuda_registry(tinylm_registry_path: Path) -> Iterator[ModelRegistry]:
    """tinylm's registry with its models on the CUDA device (as ``device = "cuda"``
    gives the worker)."""
    registry = ModelRegistry.from_toml(tinylm_registry_path, device=torch.device("cuda"))
    try:
        yield registry
    finally:
        lease = _model(registry).lease
        if isinstance(lease, RunnerLease) and isinstance(lease.runner, GenerativeEngine):
            lease.runner.stop()  # joins the engine's generation thread
        registry.close()


def _model(registry: ModelRegistry) -> GenerativeModel:
    model = registry.get("tinylm")
    assert isinstance(model, GenerativeModel)
    return model


def _lm(model: GenerativeModel) -> torch.nn.Module:
    assert isinstance(model.module, torch.nn.Module)
    return model.module


def _prompts(model: GenerativeModel, n: int, seed: int) -> list[GenerationItem]:
    adapter = model.generative_adapter
    rng = random.Random(seed)
    return [
        adapter.prepare({"prompt": prompt(rng, 2, 30), "max_new_tokens": rng.randint(8, 64)})
        for _ in range(n)
    ]


def _divergence(
    model: GenerativeModel, item: GenerationItem, want: list[int], got: list[int]
) -> str:
    """Where the engine's tokens leave ``generate()``'s, with the gap between the two
    tokens' logits there (a gap near 1e-6 is a floating-point tie, not a wrong token)."""
    k = next((i for i, (a, b) in enumerate(zip(want, got, strict=False)) if a != b), None)
    if k is None:
        return f"one is a prefix of the other: {len(want)} tokens from generate(), {len(got)}"
    ids = torch.tensor([[*item.prompt_ids, *want[:k]]], device=model.device)
    with torch.inference_mode():
        logits = _lm(model)(ids).logits[0, -1].float()
    gap = float(logits[want[k]] - logits[got[k]])
    return f"token {k}: generate() {want[k]}, the engine {got[k]}; logit gap {gap:.3g}"


async def test_greedy_tokens_on_cuda_equal_generate_one_at_a_time(
    cuda_registry: ModelRegistry,
) -> None:
    model = _model(cuda_registry)
    assert model.device.type == "cuda"
    assert all(p.is_cuda for p in _lm(model).parameters())
    engine = engine_of(model, lambda _bytes: None, SchedulingConfig().lane_shares())
    items = _prompts(model, 8, seed=11)
    jobs = [Job(f"r{i}", Priority.NORMAL, it.prompt_ids, it.sampling) for i, it in enumerate(items)]
    done = await generate_all(engine, jobs)
    for i, item in enumerate(items):
        reference = greedy_reference(model, item)
        got = list(done[f"r{i}"].token_ids)
        assert got == reference, f"prompt {i}: {_divergence(model, item, reference, got)}"
        assert done[f"r{i}"].finish_reason == (
            "eos" if len(reference) < item.sampling.max_new_tokens else "length"
        )
