"""Score a window's prepared items in batches; outputs come back as Arrow columns.

The forward pass is the registry's loaded model (the same module and adapter the
worker serves). A batch that raises is bisected until the rows that fail alone are
found, as the executor does; those rows become errors, the rest are scored. Text is
batched by length (less padding) and put back in row order.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import torch

from consumers.errors import ModelFailed, NonFiniteOutput
from worker.executor import item_error
from worker.models import ClassifierAdapter, LoadedModel, RegressorAdapter


@dataclass(slots=True)
class Scored:
    """Outputs of the rows that scored (``keep``), in row order, and the rows that failed."""

    keep: np.ndarray  # bool, one per decoded row
    failures: list[tuple[int, str, str]]  # (index among decoded rows, error code, message)
    columns: dict[str, pa.Array]
    numeric: np.ndarray | None  # the number the drift log compares (label, value)
    compute_s: float
    # Per-row outputs as the worker returns them (JSON values or pre-serialized fragments).
    to_json: Callable[[], list[Any]]


def score(model: LoadedModel, items: np.ndarray | list[Any], batch_size: int) -> Scored:
    started = time.perf_counter()
    n = len(items)
    if model.adapter.variable_cost and n:
        order = np.argsort([model.adapter.cost(i) for i in items], kind="stable")
    else:
        order = np.arange(n)
    done: list[tuple[np.ndarray, torch.Tensor]] = []
    failures: list[tuple[int, str, str]] = []
    for i in range(0, n, batch_size):
        _isolating(model, items, order[i : i + batch_size], done, failures)
    keep = np.zeros(n, dtype=bool)
    if done:
        positions = np.concatenate([p for p, _ in done])
        output = torch.cat([t for _, t in done])
        back = np.argsort(positions, kind="stable")
        output, positions = output[torch.from_numpy(back)], positions[back]
        keep[positions] = True
    else:
        output = torch.zeros((0,))
    columns, numeric, to_json = _columns(model, output)
    return Scored(keep, failures, columns, numeric, time.perf_counter() - started, to_json)


def _isolating(
    model: LoadedModel,
    items: np.ndarray | list[Any],
    idx: np.ndarray,
    done: list[tuple[np.ndarray, torch.Tensor]],
    failures: list[tuple[int, str, str]],
) -> None:
    try:
        done.append((idx, _forward(model, _pick(items, idx))))
    except Exception as exc:
        if len(idx) == 1:
            error = item_error("model raised on this input", exc)
            failures.append((int(idx[0]), error.code, error.message))
            return
        mid = len(idx) // 2
        _isolating(model, items, idx[:mid], done, failures)
        _isolating(model, items, idx[mid:], done, failures)


def _pick(items: np.ndarray | list[Any], idx: np.ndarray) -> np.ndarray | list[Any]:
    if isinstance(items, np.ndarray):
        contiguous = len(idx) and idx[-1] - idx[0] == len(idx) - 1
        return items[idx[0] : idx[-1] + 1] if contiguous else items[idx]
    return [items[i] for i in idx]


def _forward(model: LoadedModel, items: np.ndarray | list[Any]) -> torch.Tensor:
    # A numeric window is already one matrix: no per-row collate.
    if isinstance(items, np.ndarray):
        output = model.forward_collated(torch.from_numpy(items))
    else:
        output = model.forward(items)
    if not isinstance(output, torch.Tensor) or output.ndim == 0 or output.shape[0] != len(items):
        what = tuple(output.shape) if isinstance(output, torch.Tensor) else type(output).__name__
        raise ModelFailed(f"model returned {what} for {len(items)} inputs")
    # NaN and Infinity are not JSON, and no drift row may hold them (as in the adapters).
    if not bool(torch.isfinite(output).all()):
        raise NonFiniteOutput("model output holds NaN or Infinity for this input")
    return output.detach().float().cpu()


def _fixed_lists(matrix: np.ndarray) -> pa.Array:
    width = matrix.shape[1] if matrix.ndim == 2 else 1
    return pa.FixedSizeListArray.from_arrays(pa.array(matrix.reshape(-1)), width)


def _json_rows(matrix: np.ndarray) -> list[bytes]:
    """Each row of a float matrix as JSON array items, from one serialization.

    Stored results are the JSON a Kafka request gets, written as pre-serialized
    fragments: per-row Python lists and dicts cost more than the forward pass on small
    models. float32 values are written in their shortest float32 form.
    """
    if not len(matrix):
        return []
    text = orjson.dumps(np.ascontiguousarray(matrix), option=orjson.OPT_SERIALIZE_NUMPY)
    return text[2:-2].split(b"],[")


def _columns(
    model: LoadedModel, output: torch.Tensor
) -> tuple[dict[str, pa.Array], np.ndarray | None, Callable[[], list[Any]]]:
    """Columnar versions of the adapters' ``split``, with the same JSON per row for SQL."""
    adapter, n = model.adapter, len(output)
    if n == 0:
        return {}, np.zeros(0), list
    if isinstance(adapter, ClassifierAdapter):
        probs_t = torch.softmax(output.reshape(n, adapter.num_classes), dim=1)
        probs, labels = probs_t.numpy(), probs_t.argmax(dim=1).numpy()

        def classes() -> list[Any]:
            return [
                orjson.Fragment(b'{"label":%d,"probs":[%b]}' % (label, row))
                for label, row in zip(labels.tolist(), _json_rows(probs), strict=True)
            ]

        columns = {"label": pa.array(labels), "probs": _fixed_lists(probs)}
        return columns, labels.astype(np.float64), classes
    if isinstance(adapter, RegressorAdapter):
        values = output.reshape(n).double().numpy()
        return {"output": pa.array(values)}, values, lambda: list(values.tolist())
    if output.ndim == 2:
        matrix = output.numpy()
        return (
            {"embedding": _fixed_lists(matrix)},
            None,
            lambda: [orjson.Fragment(b"[%b]" % row) for row in _json_rows(matrix)],
        )
    outputs = adapter.split(output, n)
    texts = pa.array([orjson.dumps(o).decode() for o in outputs], type=pa.string())
    return {"outputs": texts}, None, lambda: outputs
