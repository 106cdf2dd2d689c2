"""What goes into a generative engine and what comes out of it: a sequence's ``Job``
and how it ended, ``Finished``. Plain types, so that what hands sequences around
(the worker's stages, delivery, offline jobs) loads without transformers' engine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import JsonValue

from consumers.contract import Priority
from worker.base.generation import Sampling, ms


@dataclass(frozen=True, slots=True)
class Job:
    request_id: str
    lane: Priority
    prompt_ids: tuple[int, ...]
    sampling: Sampling
    deadline_s: float | None = None  # monotonic


# ``length``: max_new_tokens; ``stop``: a stop string; ``expired``: its deadline passed.
FinishReason = Literal["eos", "length", "stop", "expired", "error"]


@dataclass(frozen=True, slots=True)
class Finished:
    """How a sequence ended, with its text so far."""

    request_id: str
    text: str
    token_ids: tuple[int, ...]
    prompt_tokens: int
    finish_reason: FinishReason
    submitted_s: float  # monotonic, as the times below
    first_token_s: float | None
    last_token_s: float | None
    error: str | None = None
    error_code: str | None = None  # with error: model_error, or model_unavailable

    @property
    def generated_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def time_per_output_token_s(self) -> float | None:
        """Mean time between generated tokens after the first."""
        n = len(self.token_ids)
        if n < 2 or self.first_token_s is None or self.last_token_s is None:
            return None
        return (self.last_token_s - self.first_token_s) / (n - 1)

    def ttft_s(self, since_s: float) -> float | None:
        """From ``since_s`` (monotonic) to the first generated token."""
        return None if self.first_token_s is None else self.first_token_s - since_s

    def outputs(self, since_s: float, *, token_ids: bool) -> dict[str, JsonValue]:
        """A result's ``outputs``; ``ttft_ms`` counts from ``since_s`` (monotonic)."""
        out: dict[str, JsonValue] = {
            "text": self.text,
            "finish_reason": self.finish_reason,
            "prompt_tokens": self.prompt_tokens,
            "generated_tokens": self.generated_tokens,
            "ttft_ms": ms(self.ttft_s(since_s)),
            "tpot_ms": ms(self.time_per_output_token_s),
        }
        if token_ids:
            out["token_ids"] = list(self.token_ids)
        return out
