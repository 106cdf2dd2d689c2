"""What a rollout is asked to do: its mode, steps, interval and gate thresholds.

Shared by the registry (a candidate's ``[candidates.rollout]`` table), the CLI and the
worker's rollout runtime.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class Mode(StrEnum):
    SHADOW = "shadow"  # the candidate computes on a sample; nothing of it is published
    CANARY = "canary"  # a share of requests (stable hash of the id) is answered by it


class State(StrEnum):
    RUNNING = "running"
    PROMOTED = "promoted"  # the candidate answers every request
    ROLLED_BACK = "rolled_back"  # a gate failed: share 0
    ABORTED = "aborted"  # stopped by a person: share 0


class Gates(BaseModel):
    """What a candidate must show before it advances, and what rolls it back.

    Error rate, disagreement and labelled error are sequential tests on the rollout's
    counts so far (docs/ROLLOUTS.md): each fails once a confidence sequence for its
    measure lies wholly above the ``allowed_*`` level, and passes once it lies wholly
    below the ``max_*`` limit. A candidate at or below every allowed level is rolled
    back by them with probability at most ``alpha``; one at or above a limit passes
    that gate with probability at most ``alpha``. The p99 gate compares each
    interval's latencies, with ``min_requests`` results of each version.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    # The chance of a wrong decision each way, for the three tests together.
    alpha: Annotated[float, Field(gt=0, le=0.5)] = 0.01
    # Candidate error share minus the primary's (error results / results).
    allowed_error_rate_increase: Annotated[float, Field(ge=0, lt=1)] = 0.0
    max_error_rate_increase: Annotated[float, Field(gt=0, le=1)] = 0.01
    # Candidate p99 latency may reach primary p99 x ratio + slack.
    max_p99_ratio: Annotated[float, Field(ge=1)] = 1.5
    p99_slack_ms: Annotated[float, Field(ge=0)] = 20.0
    # Mean disagreement with the primary on the same inputs: label disagreement share
    # (classifiers), cosine distance (embeddings), absolute difference (regressors).
    allowed_disagreement: Annotated[float, Field(ge=0)] = 0.01
    max_disagreement: Annotated[float, Field(gt=0)] = 0.05
    # Classifiers: misclassified share minus the primary's. Others: mean
    # |output - expected| relative to the primary's (0.05 = 5% worse).
    allowed_label_error_increase: Annotated[float, Field(ge=0)] = 0.0
    max_label_error_increase: Annotated[float, Field(gt=0)] = 0.05
    min_requests: Annotated[int, Field(ge=1)] = 50  # per interval, for the p99 gate
    # Unbounded measures have no sequential test (regressors' disagreement; labelled
    # error but for classifiers): their gates compare the rollout's means from these counts.
    min_compared: Annotated[int, Field(ge=1)] = 30
    min_labelled: Annotated[int, Field(ge=1)] = 30

    @model_validator(mode="after")
    def _allowed_below_max(self) -> Gates:
        for measure in ("error_rate_increase", "disagreement", "label_error_increase"):
            if getattr(self, f"allowed_{measure}") >= getattr(self, f"max_{measure}"):
                raise ValueError(f"allowed_{measure} must be below max_{measure}")
        return self


class RolloutPlan(BaseModel):
    """How a candidate version goes live."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: Mode = Mode.CANARY
    # Canary shares in percent, ascending, ending at 100 (shadow ignores them).
    steps: list[Annotated[float, Field(gt=0, le=100)]] = [1, 5, 25, 50, 100]
    interval_s: Annotated[float, Field(gt=0, le=3600)] = 60.0
    passes: Annotated[int, Field(ge=1)] = 2  # passing intervals before the next step
    # Share of the model's requests computed by both versions and compared: in shadow
    # mode the candidate's sample, in canary mode a sample of the canary's requests
    # also run on the primary.
    sample: Annotated[float, Field(gt=0, le=1)] = 0.1
    gates: Gates = Gates()

    @field_validator("steps")
    @classmethod
    def _ascending_to_100(cls, steps: list[float]) -> list[float]:
        if not steps or steps != sorted(set(steps)) or steps[-1] != 100:
            raise ValueError("steps must be distinct, ascending percentages ending at 100")
        return steps
