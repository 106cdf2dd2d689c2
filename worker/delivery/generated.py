"""A generative request's end: its chunks published first, then its Outcome.

``Streams`` receives the generative stage's events on the event loop: each chunk goes
to the ``ChunkPublisher``; at the end, once the request's chunks are acknowledged, the
Outcome (``generated``) goes on like any other (to the sink: Kafka result, SQL rows,
offsets). Statuses: ``ok`` (eos, length, stop); ``expired`` (the deadline passed:
before the first token there is no text, after it the text so far; a request whose
deadline has passed is never left running); ``error`` (the engine failed: a dead
letter too, with ``model_error`` or ``model_unavailable``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from consumers.contract import ErrorInfo, InferenceResult, Latency, Status
from consumers.errors import Expired
from consumers.records import DeadLetter
from worker.base.generation import GenerationStats, ms
from worker.base.pending import Outcome, Pending
from worker.delivery.chunks import ChunkPublisher
from worker.execution.generative.sequences import Finished
from worker.execution.generative.text_stream import Chunk
from worker.models.adapters import Adapter
from worker.models.text_score import score


def generated(
    pending: Pending, done: Finished, model_version: str | None, adapter: Adapter
) -> Outcome:
    request = pending.request
    received = pending.received_s
    now = time.monotonic()
    outputs = done.outputs(received, token_ids=getattr(pending.item, "return_tokens", False))
    outcome = Outcome(pending.record, reply_to=request.reply_to)
    status, error = Status.OK, None
    if done.finish_reason == "error":
        status = Status.ERROR
        error = ErrorInfo(code=done.error_code or "model_error", message=done.error or "")
        src = pending.record
        outcome.dead_letter = DeadLetter(src.source, src.key, src.value, error.code, error.message)
    elif done.finish_reason == "expired":
        status = Status.EXPIRED
        error = ErrorInfo(
            code=Expired.code,
            message=f"deadline passed after {done.generated_tokens} generated tokens",
        )
    exact = f1 = None
    if status == Status.OK and isinstance(request.expected, str):
        outcome.drift = adapter.drift(outputs, request.expected)
        exact, f1 = score(done.text, request.expected)
    outcome.generation = GenerationStats(
        text=done.text,
        finish_reason=done.finish_reason,
        prompt_tokens=done.prompt_tokens,
        generated_tokens=done.generated_tokens,
        ttft_ms=ms(done.ttft_s(received)),
        tpot_ms=ms(done.time_per_output_token_s),
        exact_match=exact,
        f1=f1,
    )
    outcome.result = InferenceResult(
        request_id=request.request_id,
        model=request.model,
        model_version=model_version,
        status=status,
        outputs=outputs if status != Status.ERROR else None,
        error=error,
        priority=pending.lane,
        batch_size=1,
        latency_ms=Latency(
            queue=ms(done.submitted_s - received) or 0.0,
            compute=ms(now - done.submitted_s) or 0.0,
            total=ms(now - received) or 0.0,
        ),
        metadata=request.metadata,
    )
    return outcome


class Streams:
    """The generative stage's ``SequenceEvents``: chunks out, then the Outcome to ``finish``."""

    def __init__(
        self,
        chunks: ChunkPublisher,
        adapter_for: Callable[[str], Adapter],
        finish: Callable[[Pending, Outcome], None],
    ) -> None:
        self._chunks = chunks
        self._adapter_for = adapter_for
        self._finish = finish
        self._ending: set[asyncio.Task[None]] = set()

    def chunk(self, pending: Pending, chunk: Chunk, first_token_s: float) -> None:
        self._chunks.add(pending, chunk, first_token_s)

    def done(self, pending: Pending, finished: Finished, model_version: str | None) -> None:
        task = asyncio.create_task(self._end(pending, finished, model_version))
        self._ending.add(task)
        task.add_done_callback(self._ending.discard)

    async def _end(self, pending: Pending, finished: Finished, model_version: str | None) -> None:
        await self._chunks.flushed(pending.request.request_id)
        adapter = self._adapter_for(pending.model)
        self._finish(pending, generated(pending, finished, model_version, adapter))

    async def stop(self) -> None:
        for task in self._ending:
            task.cancel()
        await asyncio.gather(*self._ending, return_exceptions=True)
        await self._chunks.stop()
