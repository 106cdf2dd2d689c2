"""Adapters: turn request inputs into one batch, and the batch output back into results.

``prepare`` runs once per record on the ingest path, so it uses numpy only and costs
a few microseconds; ``collate`` and ``split`` run once per batch on the compute path.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import orjson
import torch
from pydantic import JsonValue
from tokenizers import Tokenizer

from consumers.errors import BadInput, BadLabel, ModelFailed, NonFiniteOutput
from worker.base.pending import Labelled


class Adapter(ABC):
    """One model's view of its requests; stateless after construction, so thread-safe."""

    # True when inputs vary in length: the batcher then groups items of similar cost.
    variable_cost: ClassVar[bool] = False

    @abstractmethod
    def prepare(self, inputs: JsonValue) -> Any:
        """Validate one request's ``inputs`` and return its prepared item; raise ``BadInput``."""

    @abstractmethod
    def cost(self, item: Any) -> int:
        """A length key: items of similar cost batch together with little padding."""

    @abstractmethod
    def collate(self, items: Sequence[Any]) -> Any:
        """One batch (a tensor, or a dict of tensors passed as keyword arguments)."""

    @abstractmethod
    def split(self, output: Any, n: int) -> list[JsonValue]:
        """Exactly ``n`` per-request outputs as plain JSON values; raise ``ModelFailed``."""

    @abstractmethod
    def check_expected(self, expected: JsonValue) -> None:
        """Raise ``BadLabel`` unless ``expected`` can be a label of this model: checked
        when the request is admitted, before it runs."""

    @abstractmethod
    def drift(self, output: JsonValue, expected: JsonValue) -> Labelled | None:
        """The drift log's row for one labelled answer, or None if not numeric.

        Called only for requests that carried ``expected``; raise ``BadLabel`` if it is
        malformed for this model.
        """

    @abstractmethod
    def example(self) -> JsonValue:
        """A valid ``inputs`` value, for warm-up batches."""

    def disagreement(self, output: JsonValue, other: JsonValue) -> float:
        """How far apart two versions' outputs for one input are: by default the drift
        log's |output - expected| with the other output as the label; infinite when
        they cannot be compared."""
        try:
            pair = self.drift(output, other)
        except (BadInput, ValueError):
            return math.inf
        return math.inf if pair is None else abs(pair.output - pair.expected)


_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _finite(rows: torch.Tensor) -> torch.Tensor:
    """``rows`` unchanged, or ``NonFiniteOutput``: NaN and Infinity are not JSON, and no
    drift row may hold them. One reduction per batch; the executor's bisection then
    finds the request whose output it was."""
    if not bool(torch.isfinite(rows).all()):
        raise NonFiniteOutput("model output holds NaN or Infinity for this input")
    return rows


def _float32_lists(rows: torch.Tensor) -> list[Any]:
    """A float32 matrix's rows as lists of floats that print in their shortest float32
    form, as jobs write them: ``tolist()`` gives each value's exact double, 17 digits
    where 8 or 9 say the same float32 (nearly twice the bytes on Kafka and in SQL)."""
    matrix = np.ascontiguousarray(rows.numpy())
    return list(orjson.loads(orjson.dumps(matrix, option=orjson.OPT_SERIALIZE_NUMPY)))


def _kind(value: JsonValue) -> str:
    return "null" if value is None else type(value).__name__


def _shape_text(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) or "scalar"


class _NumericAdapter(Adapter):
    """Fixed-size numeric inputs: flat ``features`` numbers, or any of ``shapes`` nested."""

    def __init__(self, features: int, shapes: Sequence[tuple[int, ...]] = ()) -> None:
        if features < 1:
            raise ValueError("features must be >= 1")
        for shape in shapes:
            if math.prod(shape) != features:
                raise ValueError(f"shape {shape} does not hold {features} numbers")
        self.features = features
        self.shapes: tuple[tuple[int, ...], ...] = ((features,), *map(tuple, shapes))
        self._lengths = frozenset(shape[0] for shape in self.shapes)
        self._accepted = " or ".join(_shape_text(s) for s in self.shapes)

    def prepare(self, inputs: JsonValue) -> np.ndarray:
        # Cheap guard before numpy walks a possibly huge list.
        if not isinstance(inputs, list):
            raise BadInput(
                f"inputs must be a list of numbers ({self._accepted}), got {_kind(inputs)}"
            )
        if len(inputs) not in self._lengths:
            raise BadInput(f"inputs must have shape {self._accepted}, got length {len(inputs)}")
        try:
            array = np.asarray(inputs)
        except ValueError as exc:
            raise BadInput(
                f"inputs must have shape {self._accepted}, got ragged nested lists"
            ) from exc
        if array.dtype.kind not in "iuf":
            raise BadInput(f"inputs must contain only numbers, got {self._element_kinds(array)}")
        if array.shape not in self.shapes:
            raise BadInput(
                f"inputs must have shape {self._accepted}, got {_shape_text(array.shape)}"
            )
        # One reduction, before the cast, catches NaN (compares false), Infinity and
        # values that float32 cannot hold; integers within int64 always fit.
        if array.dtype.kind == "f" and not abs(array).max() <= _FLOAT32_MAX:
            if np.isfinite(array).all():
                raise BadInput(f"inputs must be within float32 range (±{_FLOAT32_MAX:.3g})")
            raise BadInput("inputs must be finite numbers, found NaN or Infinity")
        return array.astype(np.float32).reshape(self.features)

    @staticmethod
    def _element_kinds(array: np.ndarray) -> str:
        if array.dtype.kind == "b":
            return "booleans"
        if array.dtype.kind == "U":
            return "strings"
        kinds = sorted({_kind(v) for v in array.reshape(-1).tolist()} - {"int", "float"})
        return ", ".join(kinds) or "integers beyond 64 bits"

    def cost(self, item: Any) -> int:
        return 1

    def collate(self, items: Sequence[Any]) -> torch.Tensor:
        return torch.from_numpy(np.stack(items))

    def example(self) -> JsonValue:
        return [0.0] * self.features

    @staticmethod
    def _rows(output: Any, n: int, width: int | None) -> torch.Tensor:
        """The output as a (n, width) or (n,) float tensor on the CPU, or ``ModelFailed``."""
        if not isinstance(output, torch.Tensor):
            raise ModelFailed(f"model returned {type(output).__name__}, expected a tensor")
        if output.ndim == 0 or output.shape[0] != n:
            raise ModelFailed(f"model returned {tuple(output.shape)} for {n} inputs")
        rows = output.reshape(n, -1) if width is not None else output.reshape(n)
        if width is not None and rows.shape[1] != width:
            raise ModelFailed(f"model returned {tuple(output.shape)}, expected ({n}, {width})")
        return _finite(rows.detach().float().cpu())


class ClassifierAdapter(_NumericAdapter):
    """Logits in, ``{"label": int, "probs": [float, ...]}`` out; drift compares labels."""

    def __init__(
        self, features: int, num_classes: int, shapes: Sequence[tuple[int, ...]] = ()
    ) -> None:
        super().__init__(features, shapes)
        if num_classes < 2:
            raise ValueError("num_classes must be >= 2")
        self.num_classes = num_classes

    def split(self, output: Any, n: int) -> list[JsonValue]:
        # Whole-batch softmax and one .tolist(): per-item tensor ops cost microseconds each.
        probs = torch.softmax(self._rows(output, n, self.num_classes), dim=1)
        labels = probs.argmax(dim=1).tolist()
        return [
            {"label": label, "probs": row}
            for label, row in zip(labels, _float32_lists(probs), strict=True)
        ]

    def check_expected(self, expected: JsonValue) -> None:
        if (
            isinstance(expected, bool)
            or not isinstance(expected, int)
            or not 0 <= expected < self.num_classes
        ):
            raise BadLabel(
                f"expected must be a class label 0..{self.num_classes - 1}, got {expected!r:.40}"
            )

    def drift(self, output: JsonValue, expected: JsonValue) -> Labelled | None:
        self.check_expected(expected)
        assert isinstance(expected, int)
        predicted, truth = float(_label(output)), float(expected)
        return Labelled(predicted, truth, float(predicted != truth))

    def disagreement(self, output: JsonValue, other: JsonValue) -> float:
        """1 when the two labels differ, else 0: averaged, the label disagreement share."""
        try:
            return float(_label(output) != _label(other))
        except ValueError:
            return math.inf


def _label(output: JsonValue) -> int:
    label = output.get("label") if isinstance(output, dict) else None
    if not isinstance(label, int):
        raise ValueError(f"not a classifier output: {output!r:.80}")
    return label


class RegressorAdapter(_NumericAdapter):
    """One number out per request; drift compares it with the expected number."""

    def split(self, output: Any, n: int) -> list[JsonValue]:
        return list(self._rows(output, n, None).tolist())

    def check_expected(self, expected: JsonValue) -> None:
        if (
            isinstance(expected, bool)
            or not isinstance(expected, int | float)
            or not math.isfinite(expected)
        ):
            raise BadLabel(f"expected must be a finite number, got {expected!r:.40}")

    def drift(self, output: JsonValue, expected: JsonValue) -> Labelled | None:
        self.check_expected(expected)
        if isinstance(output, bool) or not isinstance(output, int | float):
            raise ValueError(f"not a regressor output: {output!r:.80}")
        assert isinstance(expected, int | float)
        value, truth = float(output), float(expected)
        return Labelled(value, truth, value - truth)


class TextEmbeddingAdapter(Adapter):
    """Text in, one embedding (list of floats) out; batches are padded to their longest."""

    variable_cost = True

    def __init__(
        self, tokenizer_path: Path, max_tokens: int = 256, max_chars: int = 10_000
    ) -> None:
        self.max_tokens = max_tokens
        self.max_chars = max_chars
        self.tokenizer = Tokenizer.from_file(str(tokenizer_path))
        # tokenizer.json may carry fixed-length padding; pad to the batch's longest instead.
        self.tokenizer.enable_truncation(max_length=max_tokens)
        padding = self.tokenizer.padding or {}
        self.tokenizer.enable_padding(
            pad_id=padding.get("pad_id", 0), pad_token=padding.get("pad_token", "[PAD]")
        )

    def prepare(self, inputs: JsonValue) -> str:
        if not isinstance(inputs, str):
            raise BadInput(f"inputs must be a string, got {_kind(inputs)}")
        if not inputs.strip():
            raise BadInput("inputs must be non-empty text")
        if len(inputs) > self.max_chars:
            raise BadInput(f"inputs must be at most {self.max_chars} characters, got {len(inputs)}")
        return inputs

    def cost(self, item: Any) -> int:
        # The exact token count (truncated at max_tokens): ~40 us a sentence on the ingest
        # path, where a characters/4 estimate grouped minilm's batches with more padding
        # (docs/SCHEDULING.md, "Caps by size").
        return len(self.tokenizer.encode(item).ids)

    def collate(self, items: Sequence[Any]) -> dict[str, torch.Tensor]:
        encodings = self.tokenizer.encode_batch(list(items))
        return {
            "input_ids": torch.tensor([e.ids for e in encodings], dtype=torch.long),
            "attention_mask": torch.tensor([e.attention_mask for e in encodings], dtype=torch.long),
            "token_type_ids": torch.tensor([e.type_ids for e in encodings], dtype=torch.long),
        }

    def split(self, output: Any, n: int) -> list[JsonValue]:
        if not isinstance(output, torch.Tensor) or output.ndim != 2 or output.shape[0] != n:
            shape = tuple(output.shape) if isinstance(output, torch.Tensor) else type(output)
            raise ModelFailed(f"model returned {shape} for {n} texts, expected (n, dim)")
        return _float32_lists(_finite(output.detach().float().cpu()))

    def check_expected(self, expected: JsonValue) -> None:
        """A vector of numbers (its length is checked against the output's)."""
        if not isinstance(expected, list) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in expected
        ):
            raise BadLabel(f"expected must be a vector of numbers, got {_kind(expected)}")

    def drift(self, output: JsonValue, expected: JsonValue) -> Labelled | None:
        """(1 - cosine similarity, 0.0, the same distance), so the drift log's
        ``ABS(output - expected)`` is the cosine distance. None if the output is not a
        vector."""
        self.check_expected(expected)
        if not isinstance(output, list):
            return None
        assert isinstance(expected, list)
        if len(expected) != len(output):
            raise BadLabel(f"expected must be a vector of {len(output)} numbers")
        a = np.asarray(output, dtype=np.float64)
        b = np.asarray(expected, dtype=np.float64)
        norms = float(np.linalg.norm(a) * np.linalg.norm(b))
        if not math.isfinite(norms) or norms == 0.0:
            raise BadLabel("expected must be a finite, non-zero vector")
        distance = 1.0 - float(a @ b) / norms
        return Labelled(distance, 0.0, distance)

    def example(self) -> JsonValue:
        return "warm-up sentence"
