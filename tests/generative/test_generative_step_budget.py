"""The step's token budget beside a live high sequence (``high_demand`` and
``step_tokens_for``, pure deciders):
a step that runs cannot be preempted, so while a high request is live the lower lanes
get at most ``BESIDE_HIGH_TOKENS`` beside its own tokens, and none while a high prompt
is computed."""

from __future__ import annotations

from transformers.generation.continuous_batching.requests import RequestState

from worker.execution.generative.step_scheduler import (
    BESIDE_HIGH_TOKENS,
    high_demand,
    step_tokens_for,
)

BUDGET = 256


def step_tokens(ranked: list[tuple[int, RequestState]], token_budget: int) -> int:
    return step_tokens_for(high_demand(ranked), token_budget)


def _waiting(request_id: str, prompt: int) -> RequestState:
    """A request whose ``prompt`` tokens are still to be computed."""
    return RequestState(request_id, initial_tokens=list(range(prompt)))


def _decoding(request_id: str) -> RequestState:
    """A request past its prompt: one token a step."""
    state = _waiting(request_id, 8)
    state.remaining_prefill_tokens = []
    return state


def _lows(n: int) -> list[tuple[int, RequestState]]:
    return [(2, _decoding(f"low{i}")) for i in range(n)]


def test_lanes_without_a_high_sequence_keep_the_whole_budget() -> None:
    assert step_tokens(_lows(200), BUDGET) == BUDGET
    assert step_tokens([(1, _waiting("n", 100)), *_lows(200)], BUDGET) == BUDGET


def test_high_sequences_alone_keep_the_whole_budget() -> None:
    assert step_tokens([(0, _waiting("h", 40)), (0, _decoding("h2"))], BUDGET) == BUDGET


def test_a_waiting_high_prompt_runs_without_lower_lanes_beside_it() -> None:
    ranked = [*_lows(200), (0, _waiting("h", 40))]
    assert step_tokens(ranked, BUDGET) == 40


def test_decoding_high_sequences_beside_a_waiting_one_count_in_its_step() -> None:
    ranked = [(0, _decoding("h1")), *_lows(200), (0, _waiting("h2", 40))]
    assert step_tokens(ranked, BUDGET) == 41


def test_decoding_high_sequences_count_one_token_each() -> None:
    ranked = [(0, _decoding("h1")), (0, _decoding("h2")), *_lows(200)]
    assert step_tokens(ranked, BUDGET) == 2 + BESIDE_HIGH_TOKENS


def test_the_budget_still_bounds_a_long_high_prompt() -> None:
    assert step_tokens([(0, _waiting("h", 400)), *_lows(10)], BUDGET) == BUDGET
