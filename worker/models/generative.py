"""The generative adapter: a causal LM's requests in, its prompt token ids out.

``prepare`` validates a request's inputs (``GenerationInputs``), renders chat messages
with the model's chat template, tokenizes, and checks the model's limits before the
request runs: the prompt within the context, ``max_new_tokens`` within the registry's
limit, and the whole sequence within the KV cache budget (a request that could never
fit is refused here, never left to run out of memory). Outputs are
``{"text", "finish_reason", "prompt_tokens", "generated_tokens"}``; a request with
``expected`` text gets a drift row scored by token-level F1 (``text_score``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from pydantic import JsonValue, ValidationError

from consumers.errors import BadInput, BadLabel, ModelFailed
from worker.base.generation import GenerationItem, Sampling
from worker.models.adapters import Adapter, Labelled
from worker.models.generative_inputs import GenerationInputs
from worker.models.text_score import score

if TYPE_CHECKING:
    from transformers import PretrainedConfig

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True, slots=True)
class GenerativeLimits:
    """What the registry entry allows and sizes (see ``GenerativeConfig``)."""

    max_context: int | None
    max_new_tokens: int
    default_max_new_tokens: int
    max_prompt_chars: int
    kv_cache_bytes: int
    page_size: int
    max_batch_tokens: int
    chunk_tokens: int
    torch_threads: int | None
    dtype: str


def kv_bytes_per_token(config: PretrainedConfig, dtype: torch.dtype) -> int:
    """Bytes of one token's keys and values over every layer (full attention)."""
    text = config.get_text_config()
    heads = text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    return 2 * text.num_hidden_layers * kv_heads * head_dim * dtype.itemsize


class GenerativeAdapter(Adapter):
    variable_cost = True

    def __init__(self, model_dir: Path, limits: GenerativeLimits) -> None:
        from transformers import AutoConfig, AutoTokenizer  # slow to import: only here

        self.limits = limits
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
        if not getattr(self.tokenizer, "is_fast", False):
            raise ValueError(f"{model_dir}: needs a fast tokenizer (tokenizer.json)")
        config = AutoConfig.from_pretrained(model_dir, local_files_only=True)
        self.eos_token_ids = _eos_ids(model_dir, config, self.tokenizer)
        positions = getattr(config.get_text_config(), "max_position_embeddings", None)
        limit = [n for n in (limits.max_context, positions) if n is not None]
        self.max_context: int | None = min(limit) if limit else None
        per_block = kv_bytes_per_token(config, DTYPES[limits.dtype]) * limits.page_size
        self.num_blocks = limits.kv_cache_bytes // per_block
        if self.num_blocks < 1:
            raise ValueError(
                f"kv_cache_bytes ({limits.kv_cache_bytes}) holds no block of {limits.page_size}"
                f" tokens ({per_block} bytes for this model)"
            )
        # One sequence must fit the cache alone (it may preempt every other one).
        self.kv_tokens = self.num_blocks * limits.page_size

    @property
    def chat(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def prepare(self, inputs: JsonValue) -> GenerationItem:
        parsed = self._parse(inputs)
        ids = self._prompt_ids(parsed)
        limits = self.limits
        new = (
            limits.default_max_new_tokens
            if parsed.max_new_tokens is None
            else parsed.max_new_tokens
        )
        if new > limits.max_new_tokens:
            raise BadInput(f"max_new_tokens must be at most {limits.max_new_tokens}, got {new}")
        total = len(ids) + new
        if self.max_context is not None and total > self.max_context:
            raise BadInput(
                f"the prompt ({len(ids)} tokens) plus max_new_tokens ({new}) is {total} tokens,"
                f" over this model's context of {self.max_context}"
            )
        if total > self.kv_tokens:
            raise BadInput(
                f"the prompt ({len(ids)} tokens) plus max_new_tokens ({new}) is {total} tokens,"
                f" more than this model's KV cache holds ({self.kv_tokens} tokens of"
                f" kv_cache_bytes = {limits.kv_cache_bytes})"
            )
        sampling = Sampling(
            max_new_tokens=new,
            temperature=float(parsed.temperature),
            top_p=float(parsed.top_p),
            seed=parsed.seed,
            stop=tuple(parsed.stop),
        )
        return GenerationItem(tuple(ids), sampling, parsed.return_tokens)

    def _parse(self, inputs: JsonValue) -> GenerationInputs:
        if isinstance(inputs, str):
            inputs = {"prompt": inputs}
        if not isinstance(inputs, dict):
            raise BadInput(
                "inputs must be a prompt string or an object with 'prompt' or 'messages',"
                f" got {type(inputs).__name__ if inputs is not None else 'null'}"
            )
        try:
            parsed = GenerationInputs.model_validate(inputs)
        except ValidationError as exc:
            raise BadInput(f"inputs: {_first_error(exc)}") from None
        text = parsed.prompt if parsed.prompt is not None else ""
        chars = len(text) + sum(len(m.content) for m in parsed.messages or ())
        if chars > self.limits.max_prompt_chars:
            raise BadInput(f"the prompt must be at most {self.limits.max_prompt_chars} characters")
        if parsed.prompt is not None and not parsed.prompt:
            raise BadInput("the prompt must not be empty")
        return parsed

    def _prompt_ids(self, parsed: GenerationInputs) -> list[int]:
        if parsed.messages is None:
            assert parsed.prompt is not None
            return list(self.tokenizer(parsed.prompt)["input_ids"])
        if not self.chat:
            raise BadInput("this model has no chat template: send a 'prompt' instead of 'messages'")
        messages = [m.model_dump() for m in parsed.messages]
        rendered = self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )
        return list(self.tokenizer(rendered, add_special_tokens=False)["input_ids"])

    def cost(self, item: Any) -> int:
        return len(item.prompt_ids)

    def collate(self, items: Sequence[Any]) -> list[GenerationItem]:
        """The items themselves: a generative model runs them on its engine."""
        return list(items)

    def split(self, output: Any, n: int) -> list[JsonValue]:
        if not isinstance(output, list) or len(output) != n:
            raise ModelFailed(f"the engine returned {type(output).__name__} for {n} requests")
        return output

    def check_expected(self, expected: JsonValue) -> None:
        if not isinstance(expected, str):
            raise BadLabel(f"expected must be the expected text (a string), got {expected!r:.40}")

    def drift(self, output: JsonValue, expected: JsonValue) -> Labelled | None:
        """(token-level F1, 1.0, F1 - 1.0): the anomaly query's ``ABS(output -
        expected) > 0.5`` counts answers with F1 below 0.5."""
        self.check_expected(expected)
        assert isinstance(expected, str)
        text = output.get("text") if isinstance(output, dict) else None
        if not isinstance(text, str):
            return None
        f1 = score(text, expected).f1
        return Labelled(f1, 1.0, f1 - 1.0)

    def disagreement(self, output: JsonValue, other: JsonValue) -> float:
        """1 - F1 between two versions' texts."""
        pair = self.drift(output, other.get("text") if isinstance(other, dict) else other)
        return math.inf if pair is None else -pair.error

    def example(self) -> JsonValue:
        return {"prompt": "Hello", "max_new_tokens": 2}


def _eos_ids(model_dir: Path, config: PretrainedConfig, tokenizer: Any) -> tuple[int, ...]:
    """End-of-sequence ids: the generation config's, else the model's, else the tokenizer's."""
    from transformers import GenerationConfig

    found: Any = None
    if (model_dir / "generation_config.json").is_file():
        found = GenerationConfig.from_pretrained(model_dir, local_files_only=True).eos_token_id
    if found is None:
        found = getattr(config, "eos_token_id", None)
    if found is None:
        found = tokenizer.eos_token_id
    if found is None:
        return ()
    return tuple(i for i in ([found] if isinstance(found, int) else found) if i >= 0)


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(p) for p in error["loc"])
    return f"{where}: {error['msg']}" if where else error["msg"]
