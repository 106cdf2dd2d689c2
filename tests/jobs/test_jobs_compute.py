"""Scoring a window: a row the model fails on, or whose output is not finite, fails alone."""

from __future__ import annotations

import numpy as np
import torch

from worker.jobs.compute import score
from worker.models import ClassifierAdapter, LoadedModel


def fussy(x: torch.Tensor) -> torch.Tensor:
    """Logits (x0, x1); NaN where x0 < 0; raises on any x0 > 100."""
    if bool((x[:, 0] > 100).any()):
        raise RuntimeError("too big")
    logits = x.clone()
    logits[x[:, 0] < 0] = float("nan")
    return logits


def test_failing_and_non_finite_rows_are_isolated_and_the_rest_keep_their_order() -> None:
    model = LoadedModel("fussy", "1", fussy, ClassifierAdapter(2, 2), 4, torch.device("cpu"))
    items = np.array([[2, 1], [1, 2], [-1, 0], [3, 1], [101, 0], [0, 5], [1, 0]], dtype=np.float32)
    scored = score(model, items, batch_size=4)

    assert scored.keep.tolist() == [True, True, False, True, False, True, True]
    assert sorted((i, code) for i, code, _ in scored.failures) == [
        (2, "non_finite_output"),
        (4, "model_error"),
    ]
    assert scored.columns["label"].to_pylist() == [0, 1, 0, 1, 0]
    assert np.isfinite(np.array(scored.columns["probs"].to_pylist())).all()
