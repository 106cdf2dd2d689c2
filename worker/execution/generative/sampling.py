"""Per-request sampling that resumes exactly: temperature, top-p and a seeded draw.

transformers' continuous batching samples with one global generator, so a request's
tokens would depend on what shared its steps. Here the noise for a request's k-th
generated token comes from a generator seeded with (seed, k) alone, so the same request
gives the same tokens in any batch, after a preemption and after a replay. The draw is
Gumbel-max (the argmax of the scores plus Gumbel noise, one draw per vocabulary entry):
an exact sample of the softmax, which changes only when the two best perturbed scores
are within the scores' rounding noise of each other (batch composition moves a logit by
about 1e-6). An inverse-CDF draw from one uniform number flipped at every cumulative
boundary that noise crossed: one token in about 12,000 sampled ones differed between a
run and its replay (tests/generative/test_generative_crash.py), none with Gumbel-max.
The three processors plug into the engine's per-request logits processors, each with
one 32-bit value per sampled row. A greedy request (temperature 0) passes through
untouched and the engine's argmax picks its token.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers.generation.continuous_batching.cb_logits_processors import (
    ContinuousBatchingLogitsProcessor,
    ContinuousBatchingLogitsProcessorList,
)
from transformers.generation.continuous_batching.requests import (
    FutureRequestState,
    RequestState,
)
from transformers.generation.logits_process import LogitsProcessorList

_MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def draw_seed(seed: int, index: int) -> int:
    """The noise generator's seed for a request's ``index``-th token (31 bits)."""
    return _splitmix64(_splitmix64(seed & _MASK64) ^ index) >> 33


def tokens_generated(state: RequestState) -> int:
    """Tokens a request has generated, also after the engine restarted it with its
    generated tokens folded into the prompt (a recompute preemption)."""
    folded = (
        len(state.initial_tokens) - state._true_initial_tokens if state._true_initial_tokens else 0
    )
    return folded + len(state.generated_tokens)


def _as_rows(values: Sequence[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32).view(torch.int32)


def _fill(rows: torch.Tensor, value: float) -> None:
    rows.copy_(_as_rows([value] * rows.numel()).view_as(rows))


class Temperature(ContinuousBatchingLogitsProcessor):
    def __init__(self) -> None:
        self.supported_kwargs: dict[str, type] = {"temperature": float}
        self.ignored_kwargs: tuple[str, ...] = ()

    def fill_defaults(self, int32_tensor: torch.Tensor) -> None:
        _fill(int32_tensor, 1.0)

    def prepare_tensor_args(
        self, requests_with_new_token: list[FutureRequestState]
    ) -> torch.Tensor:
        return _as_rows(
            [
                r.state.logit_processor_kwargs.get("temperature") or 1.0
                for r in requests_with_new_token
            ]
        )

    def __call__(self, scores: torch.Tensor, tensor_arg: torch.Tensor) -> torch.Tensor:
        temperature = tensor_arg[: scores.size(0)].view(torch.float32)
        return scores / temperature.unsqueeze(-1)


class TopP(ContinuousBatchingLogitsProcessor):
    def __init__(self) -> None:
        self.supported_kwargs: dict[str, type] = {"top_p": float}
        self.ignored_kwargs: tuple[str, ...] = ()

    def fill_defaults(self, int32_tensor: torch.Tensor) -> None:
        _fill(int32_tensor, 1.0)

    def prepare_tensor_args(
        self, requests_with_new_token: list[FutureRequestState]
    ) -> torch.Tensor:
        return _as_rows(
            [r.state.logit_processor_kwargs.get("top_p", 1.0) for r in requests_with_new_token]
        )

    def __call__(self, scores: torch.Tensor, tensor_arg: torch.Tensor) -> torch.Tensor:
        top_p = tensor_arg[: scores.size(0)].view(torch.float32)
        if bool((top_p >= 1.0).all()):
            return scores
        ascending, order = torch.sort(scores, dim=-1)
        cumulative = ascending.softmax(dim=-1).cumsum(dim=-1)
        drop = cumulative <= (1 - top_p).unsqueeze(-1)
        drop[..., -1:] = False  # the most likely token always stays
        return scores.masked_fill(drop.scatter(-1, order, drop), float("-inf"))


class SeededDraw(ContinuousBatchingLogitsProcessor):
    """Leaves one finite score per sampled row: the token its (seed, index) draw picks."""

    def __init__(self) -> None:
        self.supported_kwargs: dict[str, type] = {"seed": int}
        self.ignored_kwargs: tuple[str, ...] = ()

    def fill_defaults(self, int32_tensor: torch.Tensor) -> None:
        int32_tensor.fill_(-1)

    def prepare_tensor_args(
        self, requests_with_new_token: list[FutureRequestState]
    ) -> torch.Tensor:
        seeds = []
        for r in requests_with_new_token:
            kwargs = r.state.logit_processor_kwargs
            sampled = kwargs.get("temperature", 0.0) > 0.0
            index = tokens_generated(r.state)
            seeds.append(draw_seed(kwargs.get("seed", 0), index) if sampled else -1)
        return torch.tensor(seeds, dtype=torch.int32)

    def __call__(self, scores: torch.Tensor, tensor_arg: torch.Tensor) -> torch.Tensor:
        seeds = tensor_arg[: scores.size(0)].tolist()
        rows = [(row, seed) for row, seed in enumerate(seeds) if seed >= 0]
        if not rows:
            return scores
        out = scores.clone()
        generator = torch.Generator()  # on the host: the same noise on any device
        for row, seed in rows:
            generator.manual_seed(seed)
            noise = torch.rand(scores.size(-1), generator=generator, dtype=torch.float64)
            gumbel = -torch.log(-torch.log(noise))
            perturbed = scores[row].double().cpu() + gumbel
            picked = int(perturbed.argmax())
            out[row] = float("-inf")
            out[row, picked] = 0.0
        return out


def processors() -> ContinuousBatchingLogitsProcessorList:
    """The engine's per-request processors: temperature, then top-p, then the draw."""
    chain = ContinuousBatchingLogitsProcessorList(
        LogitsProcessorList([Temperature(), TopP(), SeededDraw()])
    )
    chain.tensors_required = 3  # one row each; the engine counts only those it converted
    return chain
