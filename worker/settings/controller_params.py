"""Per-model controller parameters: the ``[models.scheduling]`` table of the registry."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ControllerParams(BaseModel):
    """How one model's batch cap moves (docs/SCHEDULING.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_util: Annotated[float, Field(ge=0, le=1)] = 0.60  # below: headroom, grow
    max_util: Annotated[float, Field(ge=0, le=1)] = 0.80  # above: busy
    step_up: Annotated[float, Field(gt=0, le=4)] = 0.20  # growth per decision (fraction)
    step_down: Annotated[float, Field(gt=0, lt=1)] = 0.10  # shrink per decision (fraction)
    # Tail of one batch's forward pass the model's cap may reach, in every lane (a
    # request that arrives while a batch runs waits for it). None: the lanes' own
    # targets (``scheduling.<lane>_latency_target_ms``) bound their batches, and the cap
    # goes where the throughput is highest.
    latency_target_ms: Annotated[float, Field(gt=0)] | None = None
    # Padded size cap: items x largest item cost (tokens for text, 1 per numeric item).
    max_batch_cost: Annotated[int, Field(ge=1)] | None = None

    @model_validator(mode="after")
    def _ordered(self) -> ControllerParams:
        if self.min_util > self.max_util:
            raise ValueError("min_util must not exceed max_util")
        return self
