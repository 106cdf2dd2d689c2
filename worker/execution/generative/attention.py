"""Attention for continuous batching on CPU: each sequence's queries against its own keys.

transformers' continuous batching hands ``sdpa`` a step as one packed sequence: every
query token of the step against every key read for the step, under a block-diagonal
mask it builds each step, after copying the keys and values once per query-head group.
With n sequences of k cached tokens each, a decoding step computes n x n k scores per
head where n k would do, so past a few live sequences a step cost more than padded
batches of the same requests. ``per_sequence`` attends each sequence's queries to its
own keys only (the step's ``cu_seq_lens_q`` / ``cu_seq_lens_k``), grouped heads without
the copy: a decoding token sees every key of its sequence (no mask), a fresh prompt
is causal, and a prompt chunk after cached keys gets its own causal block. The manager
builds no mask for an implementation it does not know.

Registered as ``PER_SEQUENCE``, for models whose layers all attend in full (``fits``).
The manager accepts only the attention names it knows when it is made, so the engine
switches the model to this one after making it; a call without the step's sequence
bounds (any other caller of the module) goes to transformers' own ``sdpa``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn import functional
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward

PER_SEQUENCE = "inferlane_per_sequence"
STOCK = "sdpa"  # what the model is loaded with, and what the manager checks for


def per_sequence(
    module: torch.nn.Module,
    query: torch.Tensor,  # (1, heads, step's query tokens, head dim)
    key: torch.Tensor,  # (1, kv heads, step's key tokens, head dim)
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    if isinstance(cu_k, dict):  # the cache picks the layer's entry before attention
        cu_k = next(iter(cu_k.values())) if len(cu_k) == 1 else None
    if cu_q is None or cu_k is None or query.shape[0] != 1:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    grouped = query.shape[1] != key.shape[1]
    q_at, k_at = cu_q.tolist(), cu_k.tolist()
    parts = []
    for q0, q1, k0, k1 in zip(q_at, q_at[1:], k_at, k_at[1:], strict=False):
        n_q, n_k = q1 - q0, k1 - k0
        if n_q == 0:
            continue
        mask = None
        if 1 < n_q < n_k:  # a chunk after cached keys: query i sees keys up to n_k - n_q + i
            mask = torch.ones(n_q, n_k, dtype=torch.bool).tril(n_k - n_q)
        parts.append(
            functional.scaled_dot_product_attention(
                query[:, :, q0:q1],
                key[:, :, k0:k1],
                value[:, :, k0:k1],
                attn_mask=mask,
                is_causal=n_q > 1 and mask is None,
                scale=scaling,
                enable_gqa=grouped,
            )
        )
    return torch.cat(parts, dim=2).transpose(1, 2).contiguous(), None


AttentionInterface.register(PER_SEQUENCE, per_sequence)


def fits(model: PreTrainedModel) -> bool:
    """On CPU (a GPU keeps the engine's own kernels), every layer attending in full (a
    sliding window needs masks this does not build)."""
    kinds = set(getattr(model.config, "layer_types", None) or ["full_attention"])
    return model.device.type == "cpu" and kinds == {"full_attention"}


def switch(model: PreTrainedModel, name: str) -> None:
    """Set ``model``'s attention implementation (its config's, read at every call)."""
    if model.config._attn_implementation != name:
        model.set_attn_implementation(name)
