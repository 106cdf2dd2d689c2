"""A loaded generative model: the causal LM and its adapter.

The worker serves it on the execution layer's engine (``worker.execution.generative``),
which the engine attaches as ``runner`` and charges its KV cache to the model store
(``ModelRegistry.reserve``). Leaving memory retires the runner first (its sequences
end with an error result), then frees the weights. ``run`` here generates greedily
with ``generate()``, one item at a time: the store's warm-up and plain callers; the
worker and offline jobs go through the engine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from pydantic import JsonValue

from worker.base.generation import GenerationItem
from worker.models.generative import DTYPES, GenerativeAdapter
from worker.models.model import Lease, LoadedModel
from worker.models.specs import ModelSpec


class Runner(Protocol):
    """What serves a generative model (the execution layer's engine)."""

    def retire(self, then: Callable[[], None]) -> None:
        """End what runs (each sequence with an error), stop, then call ``then``."""


class RunnerLease(Lease):
    """A model leaving memory retires its runner before its tensors are freed."""

    def __init__(self) -> None:
        super().__init__()
        self.runner: Runner | None = None

    def release(self, free: Callable[[], None]) -> None:
        runner = self.runner
        if runner is None:
            super().release(free)
            return
        self.runner = None
        runner.retire(lambda: Lease.release(self, free))


@dataclass
class GenerativeModel(LoadedModel):
    @property
    def generative_adapter(self) -> GenerativeAdapter:
        assert isinstance(self.adapter, GenerativeAdapter)
        return self.adapter

    def forward(self, items: Sequence[Any]) -> list[JsonValue]:
        """Greedy text for each prepared item, by ``generate()`` one at a time."""
        adapter = self.generative_adapter
        outputs: list[JsonValue] = []
        with self.lease.held(), torch.inference_mode():
            for item in items:
                assert isinstance(item, GenerationItem)
                ids = torch.tensor([item.prompt_ids], device=self.device)
                out = self.module.generate(  # type: ignore[attr-defined]
                    ids,
                    attention_mask=torch.ones_like(ids),
                    max_new_tokens=item.sampling.max_new_tokens,
                    do_sample=False,
                    pad_token_id=(adapter.eos_token_ids or (0,))[0],
                )
                new = out[0, len(item.prompt_ids) :].tolist()
                text = str(adapter.tokenizer.decode(new, skip_special_tokens=True))
                outputs.append({"text": text, "generated_tokens": len(new)})
        return outputs


def load_generative(
    spec: ModelSpec, device: torch.device, adapter: GenerativeAdapter
) -> GenerativeModel:
    from transformers import AutoModelForCausalLM  # slow to import; only hf models need it

    lm = AutoModelForCausalLM.from_pretrained(
        spec.path,
        local_files_only=True,
        use_safetensors=True,
        dtype=DTYPES[adapter.limits.dtype],
        attn_implementation="sdpa",
    )
    return GenerativeModel(
        name=spec.name,
        version=spec.version,
        module=lm.to(device).eval(),  # type: ignore[arg-type]
        adapter=adapter,
        max_batch=spec.max_batch,
        device=device,
        lease=RunnerLease(),
    )
