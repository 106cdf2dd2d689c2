"""Score a window's prepared items in batches; outputs come back as Arrow columns.

The forward passes run on an executor's low lane (``execution.aside.submit_rows``, the
same module and adapter the worker serves), one batch submitted ahead. A batch that
raises is bisected until the rows that fail alone are found, as the executor does;
those rows become errors, the rest are scored; a batch abandoned past the model's
compute timeout fails whole. Text is sorted by the adapter's cost (the key the lanes
group by) and cut into batches of the size the ``BatchSizer`` decides, within the
model's padded size cap (the batcher's ``CostBudget``); outputs are put back in row
order.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import torch

from consumers.errors import ModelFailed, ModelTimeout, NonFiniteOutput
from worker.base.pending import BatchRun
from worker.execution.aside import rows_output
from worker.execution.executor import item_error
from worker.jobs.batch_size import BatchSizer
from worker.models import ClassifierAdapter, LoadedModel, RegressorAdapter
from worker.scheduling.lanes import CostBudget

# A batch of a window's rows (a numeric matrix, or prepared items) in, its pass on the
# executor out (``submit_rows`` bound to an executor and a registry key).
Forward = Callable[[np.ndarray | list[Any]], Future[BatchRun]]


@dataclass(slots=True)
class Scored:
    """Outputs of the rows that scored (``keep``), in row order, and the rows that failed."""

    keep: np.ndarray  # bool, one per decoded row
    failures: list[tuple[int, str, str]]  # (index among decoded rows, error code, message)
    columns: dict[str, pa.Array]
    numeric: np.ndarray | None  # the number the drift log compares (label, value)
    batch_sizes: np.ndarray  # per kept row, in row order: rows in the forward pass that scored it
    compute_s: float
    # Per-row outputs as the worker returns them (JSON values or pre-serialized fragments).
    to_json: Callable[[], list[Any]]


def score(
    model: LoadedModel,
    items: np.ndarray | list[Any],
    sizer: BatchSizer,
    forward: Forward,
    *,
    later: int = 0,
) -> Scored:
    """Score ``items`` with ``model``'s adapter, its passes through ``forward``;
    ``later``: rows of the job after these (the sizer's backlog)."""
    started = time.perf_counter()
    n = len(items)
    costs: np.ndarray | int = model.adapter.cost(items[0]) if n else 1
    order = np.arange(n)
    if model.adapter.variable_cost and n:
        costs = np.array([model.adapter.cost(i) for i in items], dtype=np.int64)
        order = np.argsort(costs, kind="stable")
    done: list[tuple[np.ndarray, torch.Tensor]] = []
    failures: list[tuple[int, str, str]] = []
    sizer.window()
    i = 0
    # One batch submitted ahead of the one being read back, so that the executor's
    # thread never waits for this one between passes (a small model's pass is as short
    # as the hand-over).
    ahead: tuple[np.ndarray, int, int, Future[BatchRun]] | None = None
    while i < n or ahead is not None:
        current, ahead = ahead, None
        if i < n:
            end, widest = _batch_end(order, costs, i, sizer.size, sizer.max_cost)
            idx = order[i:end]
            ahead = (idx, widest, n - end + later, forward(_pick(items, idx)))
            i = end
        if current is None:
            continue
        idx, widest, waiting, submitted = current
        failed = len(failures)
        # The pass's own time, on the executor's thread: the hand-over's wait is the same
        # at any size and would only blur the sizes' measured rates.
        compute_s = _isolating(forward, items, idx, done, failures, submitted)
        if len(failures) == failed:  # a bisected batch's time says nothing of its size
            sizer.ran(len(idx), widest, compute_s, waiting)
    keep = np.zeros(n, dtype=bool)
    sizes = np.zeros(0, dtype=np.int64)
    if done:
        positions = np.concatenate([p for p, _ in done])
        output = torch.cat([t for _, t in done])
        sizes = np.concatenate([np.full(len(p), len(p)) for p, _ in done])
        back = np.argsort(positions, kind="stable")
        output, positions, sizes = output[torch.from_numpy(back)], positions[back], sizes[back]
        keep[positions] = True
    else:
        output = torch.zeros((0,))
    columns, numeric, to_json = _columns(model, output)
    elapsed = time.perf_counter() - started
    return Scored(keep, failures, columns, numeric, sizes, elapsed, to_json)


def _batch_end(
    order: np.ndarray, costs: np.ndarray | int, start: int, size: int, max_cost: int | None
) -> tuple[int, int]:
    """Where the batch starting at ``start`` (in ``order``) ends, and its widest cost:
    ``size`` items at most, within the padded size cap. ``costs``: one per item, or the
    one cost of every item (no variable cost)."""
    n = len(order)
    if isinstance(costs, int):
        cap = size if max_cost is None else max(1, min(size, max_cost // costs))
        return min(n, start + cap), costs
    budget = CostBudget(max_cost)
    end = start
    while end < n and end - start < size and budget.fits(int(costs[order[end]])):
        budget.add(int(costs[order[end]]))
        end += 1
    return end, budget.widest


def _isolating(
    forward: Forward,
    items: np.ndarray | list[Any],
    idx: np.ndarray,
    done: list[tuple[np.ndarray, torch.Tensor]],
    failures: list[tuple[int, str, str]],
    submitted: Future[BatchRun] | None = None,
) -> float:
    """Score ``idx`` (already ``submitted``, or now), bisecting on failure; the seconds
    its passes computed."""
    try:
        output, compute_s = _checked(submitted or forward(_pick(items, idx)), len(idx))
    except ModelTimeout as exc:  # halves would hang as long: the batch's rows fail
        failures.extend((int(i), exc.code, str(exc)) for i in idx)
        return 0.0
    except Exception as exc:
        if len(idx) == 1:
            error = item_error("model raised on this input", exc)
            failures.append((int(idx[0]), error.code, error.message))
            return 0.0
        mid = len(idx) // 2
        return _isolating(forward, items, idx[:mid], done, failures) + _isolating(
            forward, items, idx[mid:], done, failures
        )
    done.append((idx, output))
    return compute_s


def _pick(items: np.ndarray | list[Any], idx: np.ndarray) -> np.ndarray | list[Any]:
    if isinstance(items, np.ndarray):
        contiguous = len(idx) and idx[-1] - idx[0] == len(idx) - 1
        return items[idx[0] : idx[-1] + 1] if contiguous else items[idx]
    return [items[i] for i in idx]


def _checked(run: Future[BatchRun], n: int) -> tuple[torch.Tensor, float]:
    output, compute_s = rows_output(run)
    if not isinstance(output, torch.Tensor) or output.ndim == 0 or output.shape[0] != n:
        what = tuple(output.shape) if isinstance(output, torch.Tensor) else type(output).__name__
        raise ModelFailed(f"model returned {what} for {n} inputs")
    # NaN and Infinity are not JSON, and no drift row may hold them (as in the adapters).
    if not bool(torch.isfinite(output).all()):
        raise NonFiniteOutput("model output holds NaN or Infinity for this input")
    return output.float(), compute_s


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
