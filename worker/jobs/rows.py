"""One scored window → its output table, error lines, SQL rows and counter increments.

SQL rows follow the worker's contract: request id ``"{job}:{row}"``, ``ok`` results
with the same outputs a Kafka request gets, ``rejected`` for bad rows and ``error``
for rows the model failed on, and a drift row for each labelled ``ok`` row.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa

from consumers.contract import Priority, Status
from consumers.errors import BadInput
from storage import GenerationRow, ResultRow, RowColumns, Same
from storage.jobs import WindowCounts
from worker.jobs.batch_size import BatchSizer
from worker.jobs.compute import Forward, Scored, score
from worker.jobs.decode import Decoded, RowError
from worker.jobs.outputs import output_table
from worker.jobs.sources import Window
from worker.models import Adapter, ClassifierAdapter, LoadedModel
from worker.models.generative_model import GenerativeModel


@dataclass(slots=True)
class WindowResult:
    table: pa.Table
    errors: list[dict[str, Any]]
    results: RowColumns  # rows of inference_results
    drift: RowColumns  # rows of inference_log
    counts: WindowCounts
    generations: list[GenerationRow]  # a generative model's rows of ``generations``


def window_result(
    job: str,
    window: Window,
    decoded: Decoded,
    model: LoadedModel,
    sizer: BatchSizer,
    forward: Forward,
    *,
    sql_results: bool = True,
    later: int = 0,
) -> WindowResult:
    """``forward``: the window's passes (see ``score``); ``sql_results``: build the result
    and drift rows; ``later``: rows of the job after this window (the sizer's backlog)."""
    if isinstance(model, GenerativeModel):  # its engine, not forward passes: a local job's
        raise ValueError(f"model {model.name!r} is generative: only a local job scores it")
    scored = score(model, decoded.items, sizer, forward, later=later)
    labels = _numeric_labels(model.adapter, decoded, scored)
    return assembled(job, window, decoded, model, scored, labels, sql_results=sql_results)


RESULT_COLUMNS = tuple(f.name for f in fields(ResultRow))
NO_ROWS = RowColumns(0, {})


@dataclass(slots=True)
class Labels:
    """What a window's labels gave, over its scored rows."""

    truth: pa.Array | None  # the output file's ``expected`` column; None: no label column
    drift: list[tuple[int, float, float, float]]  # (row, output, expected, error)
    labelled: int = 0
    correct: int = 0
    abs_error_sum: float = 0.0


def assembled(
    job: str,
    window: Window,
    decoded: Decoded,
    model: LoadedModel,
    scored: Scored,
    labels: Labels,
    *,
    sql_results: bool,
    generations: list[GenerationRow] | None = None,
) -> WindowResult:
    """The window's output table, error lines, SQL rows (with ``sql_results``) and counts."""
    keep = scored.keep
    errors = list(decoded.errors)
    for i, code, message in scored.failures:
        rid = decoded.ids[i].as_py() if decoded.ids is not None else None
        errors.append(RowError(int(decoded.rows[i]), rid, message, code=code))
    errors.sort(key=lambda e: (e.row is None, e.row or 0))
    rows = decoded.rows[keep]
    columns: dict[str, pa.Array] = {"row": pa.array(rows)}
    if decoded.ids is not None:
        columns["id"] = decoded.ids.filter(pa.array(keep))
    table = output_table(columns, scored.columns, labels.truth)

    results = drift = NO_ROWS
    if sql_results:
        now = datetime.now(UTC)
        failed = [
            error_row(job, window.start, model.name, model.version, e, now)
            for e in errors
            if e.row is not None
        ]
        results = _ok_rows(job, window, model, rows, scored, now)
        results += RowColumns.of_rows(failed, RESULT_COLUMNS)
        drift = _drift_rows(job, model, labels.drift, now)
    counts = WindowCounts(
        len(window), len(errors), labels.labelled, labels.correct, labels.abs_error_sum
    )
    lines = [error_line(e) for e in errors]
    return WindowResult(table, lines, results, drift, counts, generations or [])


def _numeric_labels(adapter: Adapter, decoded: Decoded, scored: Scored) -> Labels:
    if decoded.expected is None:
        return Labels(None, [])
    classes = isinstance(adapter, ClassifierAdapter)
    expected = decoded.expected[scored.keep]
    labels = Labels(expected_column(expected, classes=classes), [])
    if scored.numeric is None:
        return labels
    usable = usable_labels(adapter, expected)
    output, truth = scored.numeric[usable], expected[usable]
    labels.labelled = int(usable.sum())
    labels.correct = int((output == truth).sum())
    # The drift log's error, as ``Labelled`` has it: 0 or 1 for a classifier.
    error = (output != truth).astype(np.float64) if classes else output - truth
    labels.abs_error_sum = float(np.abs(error).sum())
    rows = decoded.rows[scored.keep][usable]
    labels.drift = list(
        zip(rows.tolist(), output.tolist(), truth.tolist(), error.tolist(), strict=True)
    )
    return labels


def expected_column(expected: np.ndarray, *, classes: bool) -> pa.Array:
    """The input's labels as the job reads them (the values its accuracy and drift rows
    compare): whole numbers for a classifier (``classes``), numbers otherwise; null
    where a row has none, or one that is not a number (not a whole number, for a
    classifier)."""
    missing = ~np.isfinite(expected)
    if not classes:
        return pa.array(expected, mask=missing)
    whole = ~missing & (expected == np.round(expected)) & (np.abs(expected) < 2.0**53)
    return pa.array(np.where(whole, expected, 0).astype(np.int64), mask=~whole)


def usable_labels(adapter: Adapter, expected: np.ndarray) -> np.ndarray:
    """Labels the drift log can use (a malformed one never fails a good prediction)."""
    usable = np.isfinite(expected)
    if isinstance(adapter, ClassifierAdapter):
        usable &= (expected == np.round(expected)) & (expected >= 0)
        usable &= expected < adapter.num_classes
    return usable


def _source(job: str) -> str:
    return f"job:{job}"


def _ok_rows(
    job: str,
    window: Window,
    model: LoadedModel,
    rows: np.ndarray,
    scored: Scored,
    now: datetime,
) -> RowColumns:
    compute_ms = round(scored.compute_s * 1000, 3)
    ids = rows.tolist()
    return RowColumns(
        len(ids),
        {
            "request_id": [f"{job}:{row}" for row in ids],
            "model": Same(model.name),
            "model_version": Same(model.version),
            "status": Same(Status.OK.value),
            "priority": Same(Priority.LOW.value),
            "outputs": scored.to_json(),
            "error_code": Same(None),
            "error_message": Same(None),
            "queue_ms": Same(0.0),
            "compute_ms": Same(compute_ms),
            "total_ms": Same(compute_ms),
            "batch_id": Same(f"{job}@{window.start}"),
            "batch_size": scored.batch_sizes.tolist(),
            "source_topic": Same(_source(job)),
            "source_partition": Same(0),
            "source_offset": ids,
            "created_at": Same(now),
        },
    )


def _drift_rows(
    job: str, model: LoadedModel, pairs: list[tuple[int, float, float, float]], now: datetime
) -> RowColumns:
    if not pairs:
        return NO_ROWS
    rows, output, expected, error = zip(*pairs, strict=True)
    return RowColumns(
        len(rows),
        {
            "request_id": [f"{job}:{row}" for row in rows],
            "model": Same(model.name),
            "model_version": Same(model.version),
            "output": output,
            "expected": expected,
            "error": error,
            "created_at": Same(now),
        },
    )


def error_row(
    job: str, start: int, model: str, version: str | None, e: RowError, now: datetime
) -> ResultRow:
    """A bad row's ``rejected`` result, or the ``error`` of a row the model failed on."""
    failed = e.code is not None
    status, code = (Status.ERROR, e.code) if failed else (Status.REJECTED, BadInput.code)
    return ResultRow(
        f"{job}:{e.row}",
        model,
        version if failed else None,
        status.value,
        Priority.LOW.value,
        None,
        code,
        e.reason,
        0.0,
        0.0,
        0.0,
        f"{job}@{start}",
        0,
        _source(job),
        0,
        e.row or 0,
        now,
    )


def error_line(e: RowError) -> dict[str, Any]:
    line: dict[str, Any] = {"row": e.row, "error": e.reason}
    if e.id is not None:
        line["id"] = e.id
    if e.line is not None:
        line["line"] = e.line
    return line
