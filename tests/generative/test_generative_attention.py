"""Per-sequence attention: the same output as transformers' packed, masked sdpa on a
mixed step, and the engine on CPU runs its steps through it."""

from __future__ import annotations

from typing import Any

import torch
from generative_reference import generate_all
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from consumers.contract import Priority
from worker.base.generation import Sampling
from worker.execution.generative import attention
from worker.execution.generative.runtime import engine_of
from worker.execution.generative.sequences import Job
from worker.models import ModelRegistry
from worker.models.generative_model import GenerativeModel
from worker.settings import SchedulingConfig


class _Grouped(torch.nn.Module):
    """What sdpa reads from an attention layer: its query heads per key-value head."""

    num_key_value_groups = 2
    is_causal = True


def test_per_sequence_equals_the_packed_masked_step() -> None:
    """A step of three sequences as continuous batching packs it: a prefill chunk with
    keys cached before it, a fresh prefill, and a decoding token; grouped heads."""
    gen = torch.Generator().manual_seed(3)
    # (query tokens, keys already cached) per sequence
    shapes = [(5, 7), (4, 0), (1, 20)]
    heads, kv_heads, dim = 4, 2, 8
    total_q = sum(q for q, _ in shapes)
    total_k = sum(q + past for q, past in shapes)
    query = torch.randn(1, heads, total_q, dim, generator=gen)
    key = torch.randn(1, kv_heads, total_k, dim, generator=gen)
    value = torch.randn(1, kv_heads, total_k, dim, generator=gen)
    mask = torch.full((1, 1, total_q, total_k), float("-inf"))
    cu_q, cu_k, q0, k0 = [0], [0], 0, 0
    for q, past in shapes:
        for i in range(q):  # query i sees its cached keys and the chunk's up to itself
            mask[0, 0, q0 + i, k0 : k0 + past + i + 1] = 0.0
        q0, k0 = q0 + q, k0 + q + past
        cu_q.append(q0)
        cu_k.append(k0)
    step = {
        "cu_seq_lens_q": torch.tensor(cu_q),
        "cu_seq_lens_k": {"full_attention": torch.tensor(cu_k)},
    }
    layer = _Grouped()
    expected, _ = sdpa_attention_forward(layer, query, key, value, mask, scaling=0.3, **step)
    # The manager builds no mask for it: it makes its own from the bounds.
    got, _ = attention.per_sequence(layer, query, key, value, None, scaling=0.3, **step)
    assert got.shape == expected.shape == (1, total_q, heads, dim)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    # Without the step's sequence bounds (any other caller): transformers' sdpa as is.
    plain, _ = attention.per_sequence(layer, query, key, value, mask, scaling=0.3)
    torch.testing.assert_close(plain, expected)


async def test_the_engine_on_cpu_attends_per_sequence(tinylm_registry: ModelRegistry) -> None:
    """The greedy-equality tests check its tokens; this checks they went through it."""
    model = tinylm_registry.get("tinylm")
    assert isinstance(model, GenerativeModel)
    calls = 0

    def counted(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, None]:
        nonlocal calls
        calls += 1
        return attention.per_sequence(*args, **kwargs)

    AttentionInterface.register(attention.PER_SEQUENCE, counted)
    try:
        engine = engine_of(model, lambda _bytes: None, SchedulingConfig().lane_shares())
        ids = tuple(model.generative_adapter.prepare({"prompt": "the license"}).prompt_ids)
        jobs = [Job(f"a{i}", Priority.NORMAL, ids, Sampling(max_new_tokens=4)) for i in range(3)]
        done = await generate_all(engine, jobs)
    finally:
        AttentionInterface.register(attention.PER_SEQUENCE, attention.per_sequence)
    assert len(done) == 3
    assert model.module.config._attn_implementation == attention.PER_SEQUENCE
    assert calls > 0
