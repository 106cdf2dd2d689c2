"""When a drift window counts as flagged: one set of thresholds per model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class DriftThresholds(BaseModel):
    """A window crosses a threshold when its value is above it and above what chance
    alone reaches in a window of its size; the window's tests share ``alpha``, the
    chance that a window of in-distribution data is flagged. Distribution checks need
    ``min_rows`` rows in the window, labelled-error checks ``min_labelled`` labels."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    alpha: float = Field(default=0.01, gt=0, lt=1)
    psi_max: float = Field(default=0.25, gt=0)  # PSI above 0.25 is a major shift
    js_max: float = Field(default=0.1, gt=0)  # Jensen-Shannon (bits), categorical outputs
    ks_max: float = Field(default=0.25, gt=0)  # Kolmogorov-Smirnov, numeric series
    error_rate_max: float | None = Field(default=0.25, gt=0)  # classifiers: misclassified
    mae_max: float | None = Field(default=None, gt=0)  # others: mean |output - expected|
    min_rows: int = Field(default=100, ge=1)
    min_labelled: int = Field(default=30, ge=1)
    # A reference model (the eager model behind an optimized one, or the previous
    # version; same inputs): this share of requests also runs on it, and an output
    # further than the tolerance from the served one is an anomaly.
    reference_model: str | None = None
    reference_share: float = Field(default=0.01, gt=0, le=1)
    reference_tolerance: float = Field(default=1e-3, ge=0)
