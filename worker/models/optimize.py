"""Guarded optimization: an optimized module serves only if it matches eager.

The candidate runs the adapter's example, alone and in a small batch, beside the eager
module; any difference beyond the tolerance, or any error, keeps eager serving, with
the reason logged and counted. Wrong numbers are worse than slow ones.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import torch

from worker.models.model import LoadedModel
from worker.models.specs import ModelSpec
from worker.models.store_metrics import StoreMetrics

log = logging.getLogger(__name__)

OPTIMIZERS: dict[str, Callable[[Any], Any]] = {"compile": torch.compile}
_SAMPLE_BATCHES = (1, 3)


def guarded(model: LoadedModel, spec: ModelSpec, metrics: StoreMetrics) -> LoadedModel:
    """``model`` with its optimized module, or unchanged when the check refuses it."""
    assert spec.optimize is not None
    try:
        candidate = dataclasses.replace(model, module=OPTIMIZERS[spec.optimize](model.module))
        reason = mismatch(model, candidate, spec.optimize_tolerance)
    except Exception as exc:
        reason = "error"
        log.warning("model %r: %s failed (%s); eager serves", spec.name, spec.optimize, exc)
    if reason is None:
        log.info("model %r: %s output matches eager; serving it", spec.name, spec.optimize)
        return candidate
    if reason != "error":
        log.warning("model %r: %s refused (%s); eager serves", spec.name, spec.optimize, reason)
    metrics.optimization_refused.labels(spec.name, reason.split(":")[0]).inc()
    return model


def mismatch(eager: LoadedModel, candidate: LoadedModel, tolerance: float) -> str | None:
    """None when ``candidate`` matches ``eager`` on the samples, else why not."""
    item = eager.adapter.prepare(eager.adapter.example())
    for n in _SAMPLE_BATCHES:
        expected, got = eager.forward([item] * n), candidate.forward([item] * n)
        if not isinstance(expected, torch.Tensor) or not isinstance(got, torch.Tensor):
            return "mismatch: outputs are not tensors"
        if expected.shape != got.shape:
            return f"mismatch: shape {tuple(got.shape)}, eager {tuple(expected.shape)}"
        diff = (expected.float() - got.float()).abs().max().item()
        if not torch.allclose(expected.float(), got.float(), rtol=tolerance, atol=tolerance):
            return f"mismatch: max difference {diff:.3g} > tolerance {tolerance:g}"
    return None
