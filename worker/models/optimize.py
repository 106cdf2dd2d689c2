"""Guarded optimization: an optimized module serves only if it matches eager.

The candidate runs the adapter's example, alone and in a small batch, and the model's
recent real inputs as one batch, beside the eager module; any difference beyond the
tolerance, or any error, keeps eager serving, with the reason logged and counted.
Wrong numbers are worse than slow ones.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch
from pydantic import JsonValue

from worker.models.model import LoadedModel
from worker.models.specs import ModelSpec
from worker.models.store_metrics import StoreMetrics

log = logging.getLogger(__name__)

OPTIMIZERS: dict[str, Callable[[Any], Any]] = {"compile": torch.compile}
_SAMPLE_BATCHES = (1, 3)


def guarded(
    model: LoadedModel, spec: ModelSpec, metrics: StoreMetrics, samples: Sequence[JsonValue] = ()
) -> LoadedModel:
    """``model`` with its optimized module, or unchanged when the check refuses it.
    ``samples``: recent real inputs of the model (see ``worker.models.samples``)."""
    assert spec.optimize is not None
    try:
        candidate = dataclasses.replace(model, module=OPTIMIZERS[spec.optimize](model.module))
        reason = mismatch(model, candidate, spec.optimize_tolerance, samples)
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


def mismatch(
    eager: LoadedModel,
    candidate: LoadedModel,
    tolerance: float,
    samples: Sequence[JsonValue] = (),
) -> str | None:
    """None when ``candidate`` matches ``eager`` on the example and the samples, else why."""
    item = eager.adapter.prepare(eager.adapter.example())
    batches = [[item] * n for n in _SAMPLE_BATCHES]
    real = [item for s in samples if (item := _prepared(eager, s)) is not None]
    if real:
        batches.append(real)
    for batch in batches:
        expected, got = eager.forward(batch), candidate.forward(batch)
        if not isinstance(expected, torch.Tensor) or not isinstance(got, torch.Tensor):
            return "mismatch: outputs are not tensors"
        if expected.shape != got.shape:
            return f"mismatch: shape {tuple(got.shape)}, eager {tuple(expected.shape)}"
        diff = (expected.float() - got.float()).abs().max().item()
        if not torch.allclose(expected.float(), got.float(), rtol=tolerance, atol=tolerance):
            return f"mismatch: max difference {diff:.3g} > tolerance {tolerance:g}"
    return None


def _prepared(model: LoadedModel, inputs: JsonValue) -> object | None:
    # Recorded under an earlier version's adapter, a sample may not fit this one.
    try:
        return model.adapter.prepare(inputs)
    except Exception:
        return None
