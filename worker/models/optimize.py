"""Guarded optimization: an optimized module serves only if it matches eager.

Two optimizers: ``compile`` (``torch.compile``) and ``trace`` (TorchScript, traced on
the adapter's example). A traced module runs its whole graph in C++ under one GIL
release per call, without the Python of the module calls; eager PyTorch releases and
retakes the GIL around every op, and beside an event loop and other Python threads
each retake may wait (figures in docs/MODEL_STORE.md).

The candidate runs the adapter's example, alone and in a small batch, and the model's
recent real inputs as one batch, beside the eager module; any difference beyond the
tolerance, or any error, keeps eager serving, with the reason logged and counted.
Wrong numbers are worse than slow ones.
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from pydantic import JsonValue

from worker.models.model import LoadedModel, to_device
from worker.models.specs import ModelSpec
from worker.models.store_metrics import StoreMetrics

log = logging.getLogger(__name__)


def traced(model: LoadedModel) -> Any:
    """``model``'s module as TorchScript, traced on the adapter's example. Tracing
    records one path through the Python code; the guard's comparison with eager (in a
    batch, and on recent real inputs) is what shows that the path holds for others."""
    example = to_device(
        model.adapter.collate([model.adapter.prepare(model.adapter.example())]), model.device
    )
    with warnings.catch_warnings(), torch.no_grad():
        # Tracing warns (TracerWarnings; torch.jit's deprecation in favour of torch.compile,
        # slow and toolchain-bound on a CPU, and torch.export, op by op in Python; the
        # model library's deprecations): the guard decides, and where tracing breaks
        # (PyTorch warns of Python 3.14+), eager serves.
        warnings.simplefilter("ignore")
        if isinstance(example, dict):
            return torch.jit.trace(model.module, example_kwarg_inputs=example, strict=False)
        return torch.jit.trace(model.module, example, strict=False)


OPTIMIZERS: dict[str, Callable[[LoadedModel], Any]] = {
    "compile": lambda model: torch.compile(model.module),
    "trace": traced,
}
_SAMPLE_BATCHES = (1, 3)


def guarded(
    model: LoadedModel, spec: ModelSpec, metrics: StoreMetrics, samples: Sequence[JsonValue] = ()
) -> LoadedModel:
    """``model`` with its optimized module, or unchanged when the check refuses it.
    ``samples``: recent real inputs of the model (see ``worker.models.samples``)."""
    assert spec.optimize is not None
    try:
        candidate = dataclasses.replace(model, module=OPTIMIZERS[spec.optimize](model))
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
