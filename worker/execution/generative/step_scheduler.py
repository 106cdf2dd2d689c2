"""Which sequences run in the next decoding step: lanes, shares and preemption.

transformers' continuous batching asks its scheduler for every step's batch; its own
schedulers are first come, first served. ``LaneStepScheduler`` orders the candidates
lane by lane (high, normal, low; within a lane, running sequences before new ones,
oldest first) within the step's token budget; while lanes contend (some candidate was
left out of the last step), a lane below its share goes first (``LaneShares``, as for
batches), except ahead of high sequences whose cut budget leaves the lower lanes their
``BESIDE_HIGH_TOKENS``. While a high sequence still has prompt tokens to compute (its
first token is due), the step runs high sequences only. A waiting request of a higher
lane whose prompt finds no free KV blocks preempts the newest sequences of lower lanes.
A preempted sequence is requeued with its generated tokens folded into its prompt (the
engine's own "soft reset"): it resumes by recomputing its KV, and its next tokens are
the ones it would have produced (``sampling`` makes a seeded draw depend on the
token's index only).
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field

from transformers.generation.continuous_batching import scheduler as engine_schedulers
from transformers.generation.continuous_batching.cache import PagedAttentionCache
from transformers.generation.continuous_batching.requests import (
    FutureRequestState,
    RequestState,
    RequestStatus,
)
from transformers.generation.continuous_batching.scheduler import Scheduler

from consumers.contract import Priority
from worker.execution.generative.step_clock import StepClock
from worker.execution.torch_threads import set_torch_threads
from worker.scheduling.lanes import LANE_ORDER
from worker.scheduling.shares import LaneShares

# Lower lanes' tokens in a step beside a decoding high sequence: a step's time grows
# with its sequences (on CPU, with a 7 ms-a-token model and contexts of a few hundred
# tokens: 192 sequences ~350 ms, 65 ~90 ms, 33 ~65 ms).
BESIDE_HIGH_TOKENS = 32
# A request the book does not know (never the case in the worker) counts as normal.
_UNKNOWN = (LANE_ORDER.index(Priority.NORMAL), 0)
Schedule = tuple[list[FutureRequestState] | None, bool, int, int]


@dataclass
class LaneBook:
    """Each request's lane rank (0: high) and arrival order. Written on the event loop,
    read on the engine's thread: single dict operations, atomic under the GIL."""

    shares: LaneShares
    ranks: dict[str, tuple[int, int]] = field(default_factory=dict)
    _arrivals: itertools.count[int] = field(default_factory=itertools.count)

    def add(self, request_id: str, lane: Priority) -> None:
        self.ranks[request_id] = (LANE_ORDER.index(lane), next(self._arrivals))

    def remove(self, request_id: str) -> None:
        self.ranks.pop(request_id, None)

    def key(self, state: RequestState) -> tuple[int, int]:
        return self.ranks.get(state.request_id, _UNKNOWN)


class LaneStepScheduler(Scheduler):
    book: LaneBook  # these three set by ``register``, on a subclass per engine
    clock: StepClock
    torch_threads: int  # the engine thread's own count, set at its first step

    def __init__(
        self, cache: PagedAttentionCache, safety_margin: float | None, max_requests_per_batch: int
    ) -> None:
        self._contended = False
        self._thread: int | None = None  # the engine thread whose torch threads are set
        # No safety margin: preemption, not a reserve, keeps a higher lane's blocks.
        super().__init__(cache, 0.0, max_requests_per_batch)

    def clear_cancelled_requests(self) -> list[RequestState]:
        self.clock.settle()  # the loop's next turn: a step without tokens ends here
        return super().clear_cancelled_requests()

    def schedule_batch(self, token_budget: int, cache_budget: int) -> Schedule:
        began_s = time.monotonic()
        if self._thread != threading.get_ident():  # a new generation loop: its first step
            self._thread = threading.get_ident()
            set_torch_threads(self.torch_threads)
        if self.waiting_requests:
            self._preempt_for(min(self.waiting_requests.values(), key=self.book.key))
        states = [*self.active_requests.values(), *self.waiting_requests.values()]
        keys = {s.request_id: self.book.key(s) for s in states}  # (rank, arrival), once
        high = high_demand([(keys[s.request_id][0], s) for s in states])
        budget = step_tokens_for(high, token_budget)
        # While the cut budget leaves the lower lanes their tokens beside high ones, the
        # high sequences go first (a lower lane owed its share would otherwise fill the
        # cut budget and hold a high prompt out, step after step); the shares decide
        # the order of the lanes below them.
        high_first = high is not None and high.tokens + BESIDE_HIGH_TOKENS <= token_budget
        first = self._owed_rank({rank for rank, _ in keys.values()})

        def place(rank: int) -> int:
            return -2 if high_first and rank == 0 else -1 if rank == first else rank

        def order(state: RequestState) -> tuple[int, bool, bool, int]:
            rank, arrival = keys[state.request_id]
            waiting = state.request_id in self.waiting_requests
            decoding = state.status == RequestStatus.DECODING
            return (place(rank), waiting, not decoding, arrival)

        candidates = sorted(states, key=order)
        removed: set[str] = set()
        scheduled, failed, fast_path, q_tokens, kv_read = self._process_candidates(
            candidates, budget, cache_budget, removed
        )
        self._cleanup_waiting_queue(removed)
        self._contended = len(scheduled) < len(candidates)
        if self._contended and scheduled:
            # The lane that went first by the shares (high ones placed first count only
            # when nothing else ran beside them).
            lanes = [keys[s.state.request_id][0] for s in scheduled]
            lead = next((r for r in lanes if not (high_first and r == 0)), lanes[0])
            self.book.shares.served(LANE_ORDER[lead])
        if not scheduled and failed:
            return None, fast_path, 0, 0
        if scheduled:
            self.clock.begin(began_s, len(scheduled))
        return scheduled, fast_path, q_tokens, kv_read

    def _owed_rank(self, ready: set[int]) -> int | None:
        """Of the lane ranks with candidates, the lane below its share that goes first,
        while lanes contend."""
        if not self._contended or len(ready) < 2:
            return None
        owed = self.book.shares.owed(LANE_ORDER[rank] for rank in sorted(ready))
        return None if owed is None else LANE_ORDER.index(owed)

    def _preempt_for(self, state: RequestState) -> None:
        """Free blocks for ``state``'s prompt by preempting lower lanes, newest first."""
        key = self.book.key
        rank = key(state)[0]
        prompt = len(state.remaining_prefill_tokens)
        if self.cache.can_store_request_tokens(state, prompt, dry_run=True):
            return
        victims = sorted((s for s in self.active_requests.values() if key(s)[0] > rank), key=key)
        while victims and not self.cache.can_store_request_tokens(state, prompt, dry_run=True):
            victim = victims.pop()
            self.cache.free_blocks(victim.request_id, no_cache=True)
            del self.active_requests[victim.request_id]
            self.add_waiting_request(victim.create_equivalent_initial_request())
            victim._status = RequestStatus.FINISHED  # as the engine marks a state it replaced
            self.clock.preempt()


@dataclass(frozen=True, slots=True)
class HighDemand:
    """The high sequences' share of the next step, while lower lanes have candidates."""

    tokens: int  # each one's prompt tokens left to compute, or one
    prefilling: bool  # some have prompt tokens left: their first token is due


def high_demand(ranked: list[tuple[int, RequestState]]) -> HighDemand | None:
    """Of candidates with their lane ranks: while high sequences (rank 0) are live
    beside lower ones, what they need of the next step; None otherwise."""
    ranks = [rank for rank, _ in ranked]
    if 0 not in ranks or max(ranks) == 0:
        return None
    prompts = [len(s.remaining_prefill_tokens) for rank, s in ranked if rank == 0]
    return HighDemand(sum(max(1, n) for n in prompts), any(prompts))


def step_tokens_for(high: HighDemand | None, token_budget: int) -> int:
    """The step's tokens: beside live high sequences, theirs and at most
    ``BESIDE_HIGH_TOKENS`` more, none while a high prompt is computed, so that a step
    (which nothing preempts once it runs) stays short while high requests wait on it."""
    if high is None:
        return token_budget
    return min(token_budget, high.tokens + (0 if high.prefilling else BESIDE_HIGH_TOKENS))


_names = itertools.count()


def register(book: LaneBook, clock: StepClock, torch_threads: int) -> str:
    """Register a scheduler over ``book`` and ``clock`` with the engine, its steps on
    ``torch_threads`` torch threads; returns its ``scheduler_type``."""
    name = f"inferlane-lanes-{next(_names)}"
    attrs = {"book": book, "clock": clock, "torch_threads": torch_threads}
    bound: type[LaneStepScheduler] = type(name, (LaneStepScheduler,), attrs)
    engine_schedulers.SCHEDULER_MAPPING[name] = bound
    return name
