"""A window of prompts generated to their ends on the model's engine (offline jobs).

The window's rows are submitted together to the engine the worker would serve them on
(continuous batching: they join and leave its steps as they start and end), on the job's
thread. Each row's output is the one a Kafka request gets (``text``, ``finish_reason``,
token counts; ``token_ids`` when the row asked); a row the engine failed on becomes an
``error`` row. A labelled row is scored as the worker scores one: exact match and
token-level F1 in its ``generations`` row, F1 in the drift log.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from consumers.errors import ModelFailed
from storage import GenerationRow
from worker.base.generation import GenerationItem, ms
from worker.execution.generative.sequences import Finished
from worker.jobs.compute import Scored
from worker.jobs.decode import Decoded
from worker.jobs.rows import Labels, WindowResult, assembled
from worker.jobs.sources import Window
from worker.models.generative_model import GenerativeModel
from worker.models.text_score import score

if TYPE_CHECKING:
    from worker.execution.generative.engine import GenerativeEngine


def generated_window(
    job: str,
    window: Window,
    decoded: Decoded,
    model: GenerativeModel,
    engine: GenerativeEngine,
    *,
    sql_results: bool = True,
) -> WindowResult:
    from worker.execution.generative.runtime import generate_all  # loads transformers

    items: list[GenerationItem] = list(decoded.items)
    started = time.perf_counter()
    finished = generate_all(engine, items)
    compute_s = time.perf_counter() - started
    keep = np.array([f.finish_reason != "error" for f in finished], dtype=bool)
    failures = [
        (i, f.error_code or ModelFailed.code, f.error or "the engine failed")
        for i, f in enumerate(finished)
        if not keep[i]
    ]
    done = [(f, it) for f, it, k in zip(finished, items, keep, strict=True) if k]
    outputs = [f.outputs(f.submitted_s, token_ids=it.return_tokens) for f, it in done]
    columns = {
        "text": pa.array([f.text for f, _ in done], type=pa.string()),
        "finish_reason": pa.array([f.finish_reason for f, _ in done], type=pa.string()),
        "prompt_tokens": pa.array([f.prompt_tokens for f, _ in done], type=pa.int64()),
        "generated_tokens": pa.array([f.generated_tokens for f, _ in done], type=pa.int64()),
    }
    ones = np.ones(len(done), dtype=np.int64)  # one sequence per result, as in the worker
    scored = Scored(keep, failures, columns, None, ones, compute_s, lambda: outputs)
    expected = None if decoded.expected is None else decoded.expected[keep]
    rows = decoded.rows[keep].tolist()
    labels, marks = _text_labels(model, [f.text for f, _ in done], rows, expected)
    generations = []
    if sql_results:
        now = datetime.now(UTC)
        generations = [
            _generation_row(f"{job}:{row}", model, f, mark, now)
            for row, (f, _), mark in zip(rows, done, marks, strict=True)
        ]
    return assembled(
        job,
        window,
        decoded,
        model,
        scored,
        labels,
        sql_results=sql_results,
        generations=generations,
    )


def _text_labels(
    model: GenerativeModel, texts: list[str], rows: list[int], expected: np.ndarray | None
) -> tuple[Labels, list[tuple[bool, float] | None]]:
    """The window's labels, and each row's (exact match, F1) where it has one."""
    if expected is None:
        return Labels(None, []), [None] * len(texts)
    labels = Labels(pa.array(expected.tolist(), type=pa.string()), [])
    marks: list[tuple[bool, float] | None] = []
    for row, text, want in zip(rows, texts, expected.tolist(), strict=True):
        if want is None:
            marks.append(None)
            continue
        exact, f1 = score(text, want)
        pair = model.adapter.drift({"text": text}, want)
        assert pair is not None  # a text output always scores
        labels.drift.append((row, pair.output, pair.expected, pair.error))
        labels.labelled += 1
        labels.correct += exact
        labels.abs_error_sum += abs(pair.error)
        marks.append((exact, f1))
    return labels, marks


def _generation_row(
    request_id: str,
    model: GenerativeModel,
    f: Finished,
    mark: tuple[bool, float] | None,
    now: datetime,
) -> GenerationRow:
    """Timings count from the row's submission: a window's rows are submitted together."""
    return GenerationRow(
        request_id,
        model.name,
        model.version,
        f.text,
        f.finish_reason,
        f.prompt_tokens,
        f.generated_tokens,
        ms(f.ttft_s(f.submitted_s)),
        ms(f.time_per_output_token_s),
        None if mark is None else mark[0],
        None if mark is None else mark[1],
        now,
    )
