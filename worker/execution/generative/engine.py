"""One causal LM served by transformers' continuous batching, with what it lacks.

The engine's own manager runs the decoding loop on a thread of its own: each step it
takes new requests and cancellations, asks the scheduler for the step's sequences
within a token budget, runs one forward pass and hands out the new tokens. Around it:
``step_scheduler`` (lanes, shares and preemption at every step), ``step_clock`` (each
step counted and timed on the engine's thread, its end the time of its tokens), ``sampling``
(per-request seeded sampling that resumes exactly), a router that hands each step's
outputs to the event loop in one call, and here: per-request routing, text streaming
(``text_stream``), stop strings, deadlines (a sequence whose deadline passes is cut
at the next step, with a terminal event), and a new generation loop if the old one
died.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from tokenizers import Tokenizer
from transformers import ContinuousBatchingConfig, GenerationConfig, PreTrainedModel
from transformers.generation.continuous_batching import ContinuousBatchingManager
from transformers.generation.continuous_batching.continuous_api import OutputRouter
from transformers.generation.continuous_batching.requests import GenerationOutput

from consumers.contract import Priority
from worker.base.blocking import own_thread
from worker.execution.generative.attention import PER_SEQUENCE, STOCK, fits, switch
from worker.execution.generative.sampling import processors
from worker.execution.generative.sequences import Finished, FinishReason, Job
from worker.execution.generative.step_clock import StepClock
from worker.execution.generative.step_scheduler import LaneBook, register
from worker.execution.generative.text_stream import Chunk, TextStream
from worker.scheduling.shares import LaneShares

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EngineSettings:
    num_blocks: int  # KV cache blocks of page_size tokens
    page_size: int
    max_batch_tokens: int  # tokens one decoding step computes at most
    chunk_tokens: int  # tokens per streamed chunk after the first
    torch_threads: int  # the engine thread's torch intra-op threads
    shares: dict[Priority, float]


# (request id, chunk, the request's first token's time: monotonic)
OnChunk = Callable[[str, Chunk, float], None]
OnFinished = Callable[[Finished], None]


@dataclass(slots=True)
class _Live:
    job: Job
    stream: TextStream
    on_chunk: OnChunk
    on_finished: OnFinished
    submitted_s: float  # monotonic, as the times below
    tokens: list[int] = field(default_factory=list)
    first_token_s: float | None = None  # the end of the step that computed it
    last_token_s: float | None = None
    timer: asyncio.TimerHandle | None = None


class _LoopRouter(OutputRouter):
    """Every step's outputs to one callback on the event loop, in one hop, with the
    step's end (its tokens' time), which the router's call marks."""

    def __init__(
        self, deliver: Callable[[list[GenerationOutput], float], None], clock: StepClock
    ) -> None:
        super().__init__()
        self._deliver = deliver
        self._clock = clock
        self.loop: asyncio.AbstractEventLoop | None = None  # set before the engine starts

    def deliver(self, output: GenerationOutput) -> None:
        self.deliver_batch([output])

    def deliver_batch(self, outputs: list[GenerationOutput]) -> None:
        step_s = self._clock.end()
        if self.loop is None:
            return
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits for these
            self.loop.call_soon_threadsafe(self._deliver, outputs, step_s)


class GenerativeEngine:
    """Submit, cancel and receive on the event loop; decode on the engine's thread."""

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: Tokenizer,
        settings: EngineSettings,
        *,
        eos_token_ids: tuple[int, ...],
    ) -> None:
        self._model = model
        self._tokenizer = tokenizer
        self._settings = settings
        self._eos = eos_token_ids
        self.book = LaneBook(LaneShares(settings.shares))
        self.clock = StepClock()
        self._live: dict[str, _Live] = {}
        self._manager: ContinuousBatchingManager | None = None
        self._router = _LoopRouter(self._on_outputs, self.clock)
        self._started = False

    @property
    def live(self) -> int:
        """Sequences submitted and not finished."""
        return len(self._live)

    def prepare(self) -> torch.Tensor:
        """Build the manager and allocate its KV cache (call off the event loop);
        returns the cache's tensor."""
        if self._manager is None:
            self._manager = self._new_manager()
        self._manager.warmup()  # creates the batch processor, which allocates the cache
        processor = self._manager.batch_processor
        assert processor is not None
        cache: torch.Tensor = processor.cache.cache_tensor
        return cache

    def stop(self, *, keep_cache: bool = False) -> None:
        """End the generation loop now (live sequences get no event: their records are
        uncommitted, so they are replayed). ``keep_cache``: a later start reuses the
        KV cache instead of allocating it again."""
        manager = self._manager
        if manager is not None and manager.is_running():
            manager.stop(block=True, timeout=10, hard_stop=True, keep_for_next_session=keep_cache)
        if not keep_cache:
            self._manager = None
        self._live.clear()
        self._started = False  # a stop, not a death: the next start is no restart

    def retire(self, then: Callable[[], None]) -> None:
        """For a model leaving memory: live sequences end with an ``error`` event,
        the loop stops, then ``then`` runs (on the event loop, if one drives the
        engine; any thread may call this)."""

        def now() -> None:
            for live in list(self._live.values()):
                message = "the model was unloaded: the model store needed its memory"
                self._finish(live, "error", message, "model_unavailable")
            self.stop()
            then()

        loop = self._router.loop
        if loop is None or loop.is_closed():
            now()
            return
        loop.call_soon_threadsafe(now)

    def run_blocking(self, jobs: list[Job]) -> list[Finished]:
        """Generate ``jobs`` to the end on an event loop of this thread (warm-ups,
        offline jobs, reference checks); the engine must not be serving a loop."""
        if self._manager is not None and self._manager.is_running():
            raise RuntimeError("the engine serves an event loop; submit() there")

        async def all_of() -> list[Finished]:
            loop = asyncio.get_running_loop()
            done: list[asyncio.Future[Finished]] = []
            for job in jobs:
                future: asyncio.Future[Finished] = loop.create_future()
                done.append(future)
                self.submit(job, lambda _id, _chunk, _first_s: None, future.set_result)
            return await asyncio.gather(*done)

        try:
            return asyncio.run(all_of())
        finally:
            self.stop(keep_cache=True)
            self._router.loop = None

    def _new_manager(self) -> ContinuousBatchingManager:
        s = self._settings
        generation = GenerationConfig(
            do_sample=False, eos_token_id=list(self._eos) or -1, max_new_tokens=s.max_batch_tokens
        )
        batching = ContinuousBatchingConfig(
            num_blocks=s.num_blocks,
            page_size=s.page_size,
            max_batch_tokens=s.max_batch_tokens,
            scheduler_type=register(self.book, self.clock, s.torch_threads),
            use_cuda_graph=False,  # our processors keep per-request state on the host
            use_async_batching=False,
            allow_block_sharing=False,
            max_memory_percent=1.0,  # the KV budget is num_blocks, not a share of free memory
        )
        switch(self._model, STOCK)
        manager = ContinuousBatchingManager(self._model, generation, batching)  # type: ignore[arg-type]
        if fits(self._model):
            switch(self._model, PER_SEQUENCE)
        # Both are handed to the batch processor when it is made: set them first.
        manager.logit_processor = processors()
        manager.output_router = self._router
        return manager

    def _running(self) -> ContinuousBatchingManager:
        """The manager, its loop started (again, if it died: its requests got errors)."""
        if self._manager is None:
            self._manager = self._new_manager()
        if not self._manager.is_running():
            if self._started:
                log.warning("the generation loop had stopped; starting a new one")
            self._started = True
            self._router.loop = asyncio.get_running_loop()
            self.clock.drop()
            # transformers starts its loop thread as a non-daemon, and a thread takes
            # that from the thread that starts it: started from a daemon, a loop nobody
            # stopped never holds up the process's exit.
            own_thread("generation-start", self._manager.start).join()
        return self._manager

    # -- requests (on the event loop) --------------------------------------------------

    def submit(self, job: Job, on_chunk: OnChunk, on_finished: OnFinished) -> None:
        manager = self._running()
        stream = TextStream(
            self._tokenizer,
            job.prompt_ids,
            stop=job.sampling.stop,
            chunk_tokens=self._settings.chunk_tokens,
        )
        now = time.monotonic()
        live = _Live(job, stream, on_chunk, on_finished, now)
        self._live[job.request_id] = live
        self.book.add(job.request_id, job.lane)
        if job.deadline_s is not None and job.deadline_s <= now:
            self._finish(live, "expired")  # never started: a timer would race the first step
            return
        if job.deadline_s is not None:
            loop = asyncio.get_running_loop()
            live.timer = loop.call_later(job.deadline_s - now, self.expire, job.request_id)
        manager.add_request(
            list(job.prompt_ids),
            request_id=job.request_id,
            max_new_tokens=job.sampling.max_new_tokens,
            streaming=True,
            **job.sampling.engine_kwargs(),  # type: ignore[arg-type]
        )

    def expire(self, request_id: str) -> None:
        """Its deadline passed: end a live sequence at the next step, with an
        ``expired`` event now that holds its text so far."""
        live = self._live.get(request_id)
        if live is None:
            return
        if self._manager is not None:
            self._manager.cancel_request(request_id)
        self._finish(live, "expired")

    def _on_outputs(self, outputs: list[GenerationOutput], step_s: float) -> None:
        for out in outputs:
            live = self._live.get(out.request_id)
            if live is None:  # expired, stopped at a stop string, or the engine stopped
                continue
            if out.error is not None:
                self._finish(live, "error", error=f"the generation loop failed: {out.error}")
                continue
            self._advance(live, out, step_s)

    def _advance(self, live: _Live, out: GenerationOutput, step_s: float) -> None:
        fresh = out.generated_tokens[len(live.tokens) :]
        if fresh:
            if live.first_token_s is None:
                live.first_token_s = step_s
            live.last_token_s = step_s
        live.tokens.extend(fresh)
        for chunk in live.stream.push(fresh):
            self._chunk(live, chunk)
        if live.stream.stopped:
            if self._manager is not None:
                self._manager.cancel_request(out.request_id)
            self._finish(live, "stop")
        elif out.is_finished():
            eos = bool(live.tokens) and live.tokens[-1] in self._eos
            self._finish(live, "eos" if eos else "length")

    def _finish(
        self,
        live: _Live,
        reason: FinishReason,
        error: str | None = None,
        error_code: str = "model_error",
    ) -> None:
        request_id = live.job.request_id
        del self._live[request_id]
        self.book.remove(request_id)
        if live.timer is not None:
            live.timer.cancel()
        last = live.stream.finish()
        if last is not None:
            self._chunk(live, last)
        kept = tuple(live.tokens[: live.stream.tokens])  # none past a stop string
        live.on_finished(
            Finished(
                request_id=request_id,
                text=live.stream.text,
                token_ids=kept,
                prompt_tokens=len(live.job.prompt_ids),
                finish_reason=reason,
                submitted_s=live.submitted_s,
                first_token_s=live.first_token_s,
                last_token_s=live.last_token_s,
                error=error,
                error_code=None if error is None else error_code,
            )
        )

    @staticmethod
    def _chunk(live: _Live, chunk: Chunk) -> None:
        assert live.first_token_s is not None  # a chunk's text comes from a token
        live.on_chunk(live.job.request_id, chunk, live.first_token_s)
