"""The generative adapter: inputs, limits and their errors; drift scores."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from consumers.errors import BadInput, BadLabel
from worker.base.generation import GenerationItem
from worker.models import ModelRegistry
from worker.models.generative import GenerativeAdapter
from worker.models.text_score import score


@pytest.fixture(scope="module")
def adapter(tinylm_registry: ModelRegistry) -> GenerativeAdapter:
    built = tinylm_registry.adapter("tinylm")
    assert isinstance(built, GenerativeAdapter)
    return built


def _limited(folder: Path, adapter_fields: str) -> GenerativeAdapter:
    registry = folder / "limited.toml"
    registry.write_text(
        '[[models]]\nname = "tinylm"\nversion = "1"\nformat = "hf"\npath = "tinylm-1"\n'
        f'adapter = {{ kind = "generative", {adapter_fields} }}\n'
    )
    built = ModelRegistry.from_toml(registry).adapter("tinylm")
    assert isinstance(built, GenerativeAdapter)
    return built


def test_a_prompt_string_is_tokenized_with_the_defaults(adapter: GenerativeAdapter) -> None:
    item = adapter.prepare("Permission is hereby granted")
    assert isinstance(item, GenerationItem)
    assert list(item.prompt_ids) == adapter.tokenizer("Permission is hereby granted")["input_ids"]
    assert item.sampling.max_new_tokens == adapter.limits.default_max_new_tokens
    assert item.sampling.temperature == 0.0


def test_messages_go_through_the_chat_template(adapter: GenerativeAdapter) -> None:
    item = adapter.prepare(
        {"messages": [{"role": "user", "content": "hi"}], "temperature": 0.5, "seed": 3}
    )
    text = adapter.tokenizer.decode(list(item.prompt_ids))
    assert text == "user: hi\nassistant:"
    assert (item.sampling.temperature, item.sampling.seed) == (0.5, 3)


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (42, "inputs must be a prompt string or an object"),
        ({"prompt": ["a", "list"]}, "prompt: Input should be a valid string"),
        ({"prompt": "x", "messages": [{"role": "user", "content": "y"}]}, "exactly one of"),
        ({}, "exactly one of"),
        ({"prompt": ""}, "must not be empty"),
        ({"prompt": "x", "max_new_tokens": 129}, "max_new_tokens must be at most 128"),
        ({"prompt": "x", "max_new_tokens": 0}, "max_new_tokens: Input should be greater"),
        ({"prompt": "x", "temperature": -1}, "temperature: Input should be greater"),
        ({"prompt": "x", "temperature": True}, "temperature"),
        ({"prompt": "x", "top_p": 0}, "top_p: Input should be greater than 0"),
        ({"prompt": "x", "top_p": 1.5}, "top_p: Input should be less than or equal to 1"),
        ({"prompt": "x", "seed": -1}, "seed: Input should be greater"),
        ({"prompt": "x", "stop": [""]}, "stop.0"),
        ({"prompt": "x", "top_k": 3}, "top_k: Extra inputs are not permitted"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages.0.role"),
    ],
)
def test_bad_inputs_are_refused_with_what_is_wrong(
    adapter: GenerativeAdapter, inputs: object, message: str
) -> None:
    with pytest.raises(BadInput) as caught:
        adapter.prepare(inputs)  # type: ignore[arg-type]
    assert message in caught.value.message


def test_a_prompt_beyond_the_context_is_refused(tinylm_registry_path: Path) -> None:
    fields = "max_context = 16, max_new_tokens = 8, default_max_new_tokens = 8"
    limited = _limited(tinylm_registry_path.parent, fields)
    with pytest.raises(BadInput, match="over this model's context of 16"):
        limited.prepare(
            {"prompt": "Permission is hereby granted, free of charge", "max_new_tokens": 8}
        )
    limited.prepare({"prompt": "Permission", "max_new_tokens": 8})


def test_a_request_the_kv_budget_cannot_hold_is_refused(tinylm_registry_path: Path) -> None:
    # 2 layers x 2 heads x 32 dims x (K, V) x 4 bytes = 1 KiB a token: 32 KiB is 32 tokens.
    limited = _limited(tinylm_registry_path.parent, "kv_cache_bytes = 32768, page_size = 16")
    assert limited.kv_tokens == 32
    with pytest.raises(BadInput, match="more than this model's KV cache holds"):
        limited.prepare({"prompt": "Permission is hereby granted", "max_new_tokens": 30})


def test_expected_must_be_text_and_scores_by_f1(adapter: GenerativeAdapter) -> None:
    with pytest.raises(BadLabel):
        adapter.check_expected(3)
    pair = adapter.drift({"text": "the cat sat"}, "the cat ran")
    assert pair is not None and math.isclose(pair.output, 2 / 3) and pair.expected == 1.0
    assert math.isclose(pair.error, 2 / 3 - 1)


def test_text_scores() -> None:
    assert score("The Cat", "the cat") == (False, 1.0)
    assert score(" same ", "same") == (True, 1.0)
    assert score("a b", "c d").f1 == 0.0
    assert score("", "") == (True, 1.0)
