"""What a generative request carries from admission to the engine: its prompt's token
ids and how to sample."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Sampling:
    max_new_tokens: int
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    seed: int = 0
    stop: tuple[str, ...] = ()

    def engine_kwargs(self) -> dict[str, float | int]:
        """The per-request arguments of the engine's sampling processors (none when
        greedy)."""
        if self.temperature <= 0.0:
            return {}
        return {"temperature": self.temperature, "top_p": self.top_p, "seed": self.seed}


@dataclass(frozen=True, slots=True)
class GenerationItem:
    """A prepared generative request."""

    prompt_ids: tuple[int, ...]
    sampling: Sampling
    return_tokens: bool = False  # the result's outputs carry the generated token ids


@dataclass(frozen=True, slots=True)
class GenerationStats:
    """How a generative request went, for its SQL row beside the result."""

    text: str
    finish_reason: str
    prompt_tokens: int
    generated_tokens: int
    ttft_ms: float | None  # from receipt by the worker to the first token
    tpot_ms: float | None  # mean time per output token after the first
    exact_match: bool | None = None  # set when the request carried expected text
    f1: float | None = None


def ms(seconds: float | None) -> float | None:
    """Seconds as the milliseconds results and rows carry."""
    return None if seconds is None else round(seconds * 1000, 3)
