"""The worker's generative stage: admitted requests of generative models go to their
model's engine instead of the lanes' batches.

Each request is submitted once its model is loaded (the model store loads it once,
whatever asks); the engine's scheduler applies the lanes at every decoding step.
Chunks and the final event go to ``SequenceEvents`` (delivery publishes and records
them). On stop, every engine this stage started is stopped; sequences still running
get no event, and their records, uncommitted, are replayed by the next consumer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from consumers.contract import Priority
from consumers.errors import InferlaneError, ModelFailed
from worker.base.blocking import off_loop
from worker.base.generation import GenerationItem
from worker.base.pending import Pending
from worker.execution.generative.metrics import EngineMeter, GenerationMetrics
from worker.execution.generative.sequences import Finished, Job
from worker.execution.generative.text_stream import Chunk
from worker.models import ModelRegistry
from worker.models.generative_model import GenerativeModel, RunnerLease

if TYPE_CHECKING:
    from worker.execution.generative.engine import GenerativeEngine

log = logging.getLogger(__name__)


class SequenceEvents(Protocol):
    """What becomes of a request's sequence (called on the event loop)."""

    def chunk(self, pending: Pending, chunk: Chunk, first_token_s: float) -> None:
        """``first_token_s``: when the request's first token was computed (monotonic)."""

    def done(self, pending: Pending, finished: Finished, model_version: str | None) -> None: ...


class GenerationStage:
    def __init__(
        self,
        registry: ModelRegistry,
        shares: Mapping[Priority, float],
        metrics: GenerationMetrics,
    ) -> None:
        self._registry = registry
        self._shares = dict(shares)
        self._metrics = metrics
        self._engines: dict[int, GenerativeEngine] = {}  # by id: every engine used here
        self._starting: set[asyncio.Task[None]] = set()

    @staticmethod
    def serves(pending: Pending) -> bool:
        return isinstance(pending.item, GenerationItem)

    def submit(self, pending: Pending, events: SequenceEvents) -> None:
        """Hand ``pending`` to its model's engine once the model is loaded and the
        engine made (both off the event loop, once per model)."""
        task = asyncio.create_task(self._submit(pending, events))
        self._starting.add(task)
        task.add_done_callback(self._starting.discard)

    async def _submit(self, pending: Pending, events: SequenceEvents) -> None:
        try:
            model, engine = await self._engine(pending.model)
        except InferlaneError as exc:
            events.done(pending, _failed(pending, exc), None)
            return
        request_id = pending.request.request_id
        item: GenerationItem = pending.item
        job = Job(request_id, pending.lane, item.prompt_ids, item.sampling, pending.deadline_s)

        def done(finished: Finished) -> None:
            events.done(pending, finished, model.version)

        engine.submit(job, lambda _id, chunk, first_s: events.chunk(pending, chunk, first_s), done)

    async def _engine(self, name: str) -> tuple[GenerativeModel, GenerativeEngine]:
        ready = self._registry.ensure(name)  # one load, on the store's loader thread
        model = ready.result() if ready.done() else await asyncio.wrap_future(ready)
        if not isinstance(model, GenerativeModel):
            raise ModelFailed(f"model {name!r} is not generative")
        lease = model.lease
        engine = lease.runner if isinstance(lease, RunnerLease) else None
        # transformers' engine loads with the first generative model served (seconds)
        from worker.execution.generative.engine import GenerativeEngine
        from worker.execution.generative.runtime import engine_of

        if not isinstance(engine, GenerativeEngine):

            def reserve(nbytes: int) -> None:
                self._registry.reserve(name, nbytes)

            engine = await off_loop(engine_of, model, reserve, self._shares)
        if id(engine) not in self._engines:
            engine.clock.meter = EngineMeter(self._metrics, name)
            self._engines[id(engine)] = engine
        return model, engine

    async def stop(self) -> None:
        """Stop every engine started here (off the event loop: each joins its thread)."""
        for task in self._starting:
            task.cancel()
        await asyncio.gather(*self._starting, return_exceptions=True)
        engines, self._engines = list(self._engines.values()), {}
        for engine in engines:
            await off_loop(engine.stop, keep_cache=True)


def _failed(pending: Pending, exc: InferlaneError) -> Finished:
    """The event of a request whose model could not serve it (no token computed)."""
    item: GenerationItem = pending.item
    return Finished(
        request_id=pending.request.request_id,
        text="",
        token_ids=(),
        prompt_tokens=len(item.prompt_ids),
        finish_reason="error",
        submitted_s=pending.received_s,
        first_token_s=None,
        last_token_s=None,
        error=exc.message,
        error_code=exc.code,
    )
