"""Seeded sampling: a request's k-th token depends on its seed, k and its own scores only."""

from __future__ import annotations

import math

import torch
from transformers.generation.continuous_batching.requests import FutureRequestState, RequestState

from worker.execution.generative.sampling import draw_seed, processors, tokens_generated


def _state(request_id: str, generated: int = 0, **kwargs: float | int) -> FutureRequestState:
    state = RequestState(
        request_id=request_id, initial_tokens=[1, 2, 3], logit_processor_kwargs=kwargs
    )
    state.generated_tokens = list(range(generated))
    return FutureRequestState(state, True, {}, 1)


def _pick(rows: list[FutureRequestState], scores: torch.Tensor) -> list[int]:
    chain = processors()
    storage = torch.zeros((chain.tensors_required, 64), dtype=torch.int32)
    args = chain.prepare_tensor_args(rows, storage)
    out = chain(torch.zeros(len(rows), dtype=torch.long), scores.clone(), args)
    return out.argmax(dim=-1).tolist()


def test_the_draw_depends_on_seed_and_index_only() -> None:
    seeds = {draw_seed(seed, k) for seed in range(20) for k in range(20)}
    assert len(seeds) == 400 and all(0 <= s < 2**31 for s in seeds)
    assert draw_seed(7, 3) == draw_seed(7, 3)


def test_a_sampled_row_picks_the_same_token_whatever_shares_its_step() -> None:
    torch.manual_seed(0)
    scores = torch.randn(6, 50)
    alone = _pick([_state("a", 4, temperature=0.9, top_p=0.8, seed=11)], scores[:1])
    crowd = [_state("a", 4, temperature=0.9, top_p=0.8, seed=11)]
    crowd += [_state(f"o{i}", i, temperature=1.0, seed=i) for i in range(5)]
    assert _pick(crowd, scores)[0] == alone[0]


def test_a_greedy_row_keeps_the_argmax() -> None:
    torch.manual_seed(1)
    scores = torch.randn(3, 50)
    rows = [_state("g"), _state("s", temperature=1.0, seed=3), _state("g2", top_p=0.5)]
    picked = _pick(rows, scores)
    assert picked[0] == int(scores[0].argmax()) and picked[2] == int(scores[2].argmax())


def test_draws_follow_the_distribution() -> None:
    scores = torch.log(torch.tensor([[0.5, 0.3, 0.2]]))
    counts = [0, 0, 0]
    for seed in range(3000):
        counts[_pick([_state("r", 0, temperature=1.0, seed=seed)], scores)[0]] += 1
    for count, p in zip(counts, (0.5, 0.3, 0.2), strict=True):
        assert abs(count / 3000 - p) < 4 * math.sqrt(p * (1 - p) / 3000)


def test_top_p_keeps_only_the_nucleus() -> None:
    scores = torch.log(torch.tensor([[0.6, 0.3, 0.05, 0.05]]))
    seen = {
        _pick([_state("r", 0, temperature=1.0, top_p=0.8, seed=s)], scores)[0] for s in range(300)
    }
    assert seen == {0, 1}


def test_the_index_counts_tokens_folded_into_the_prompt_by_a_preemption() -> None:
    state = RequestState(request_id="r", initial_tokens=[1, 2, 3])
    state.generated_tokens = [4, 5]
    resumed = state.create_equivalent_initial_request()
    resumed.generated_tokens = [6]
    assert tokens_generated(state) == 2 and tokens_generated(resumed) == 3
