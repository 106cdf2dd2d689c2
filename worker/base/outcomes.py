"""Turn what happened to a request into its Outcome: a result and/or a dead letter.

Intake ends a record it rejects here, the dispatch step a batch it ran or items whose
deadline passed; delivery takes the outcomes from there.
"""

from __future__ import annotations

import time
from typing import Protocol

from pydantic import JsonValue

from consumers.contract import (
    ErrorInfo,
    InferenceRequest,
    InferenceResult,
    Latency,
    Priority,
    Status,
)
from consumers.errors import BadInput, Expired, InferlaneError, ReplyToNotAllowed
from consumers.records import DeadLetter, RawRecord
from worker.base.pending import Batch, BatchRun, Labelled, Outcome, Pending


class Labels(Protocol):
    """The part of a model's adapter that turns an output and its label into a drift row."""

    def drift(self, output: JsonValue, expected: JsonValue) -> Labelled | None: ...


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def rejected(
    record: RawRecord,
    error: InferlaneError,
    request_id: str | None,
    request: InferenceRequest | None,
    lane: Priority,
) -> Outcome:
    """Dead letter always; a ``rejected`` result too when we know whom to tell."""
    outcome = Outcome(record, dead_letter=DeadLetter.of(record, error))
    if request_id is not None:
        total = _ms(time.monotonic() - record.received_s)
        outcome.result = InferenceResult(
            request_id=request_id,
            model=request.model if request else "",
            status=Status.REJECTED,
            error=ErrorInfo(code=error.code, message=error.message),
            priority=(request.priority if request else None) or lane,
            latency_ms=Latency(queue=0.0, compute=0.0, total=total),
            metadata=request.metadata if request else None,
        )
        # A refused reply_to gets its answer on the results topic.
        if request is not None and not isinstance(error, ReplyToNotAllowed):
            outcome.reply_to = request.reply_to
    return outcome


def expired(pending: Pending, now_s: float) -> Outcome:
    request = pending.request
    waited = _ms(now_s - pending.received_s)
    result = InferenceResult(
        request_id=request.request_id,
        model=request.model,
        status=Status.EXPIRED,
        error=ErrorInfo(code=Expired.code, message=f"deadline passed after {waited} ms in queue"),
        priority=pending.lane,
        latency_ms=Latency(queue=waited, compute=0.0, total=waited),
        metadata=request.metadata,
    )
    return Outcome(pending.record, result=result, reply_to=request.reply_to)


def completed(batch: Batch, run: BatchRun, adapter: Labels) -> list[Outcome]:
    """One outcome per item, in batch order; an item's own failure stays its own."""
    done_s = run.started_s + run.compute_s
    compute = _ms(run.compute_s)
    size = len(batch)
    outcomes = []
    for pending, item in zip(batch.items, run.results, strict=True):
        if item.expired:  # its deadline passed before the batch started
            outcomes.append(expired(pending, run.started_s))
            continue
        request = pending.request
        latency = Latency(
            queue=_ms(run.started_s - pending.received_s),
            compute=compute,
            total=_ms(done_s - pending.received_s),
        )
        outcome = Outcome(pending.record, batch_id=batch.id, reply_to=request.reply_to)
        if item.error is None:
            status, error, outputs = Status.OK, None, item.outputs
            outcome.drift = _drift(adapter, request, outputs)
        else:
            status, error, outputs = Status.ERROR, item.error, None
            src = pending.record
            outcome.dead_letter = DeadLetter(
                src.source, src.key, src.value, item.error.code, item.error.message
            )
        outcome.result = InferenceResult(
            request_id=request.request_id,
            model=request.model,
            model_version=run.model_version,
            status=status,
            outputs=outputs,
            error=error,
            priority=pending.lane,
            batch_size=size,
            latency_ms=latency,
            metadata=request.metadata,
        )
        outcomes.append(outcome)
    return outcomes


def _drift(adapter: Labels, request: InferenceRequest, outputs: JsonValue) -> Labelled | None:
    if request.expected is None:
        return None
    try:
        return adapter.drift(outputs, request.expected)
    except BadInput:  # admission checked the label; one that fits no output is left out
        return None
