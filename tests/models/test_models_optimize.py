"""Guarded optimization: an optimized module that disagrees with eager never serves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from prometheus_client import CollectorRegistry

from worker.demo.models import demo_sentences, digits_test_set
from worker.models import ModelRegistry
from worker.models import optimize as optimize_module
from worker.models.loaders import load_model
from worker.settings import ModelStoreConfig


class Skewed(torch.nn.Module):
    """A deliberately wrong "optimization": the eager module, off by a little."""

    def __init__(self, eager: Any, offset: float) -> None:
        super().__init__()
        self.eager, self.offset = eager, offset

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.eager(x) + self.offset


def optimized_registry(tmp_path: Path, demo_registry_path: Path) -> ModelRegistry:
    weights = demo_registry_path.parent / "digits-1.pt2"
    path = tmp_path / "registry.toml"
    path.write_text(
        f'[[models]]\nname = "digits"\nversion = "1"\nformat = "export"\npath = "{weights}"\n'
        'optimize = "compile"\noptimize_tolerance = 1e-4\n'
        'adapter = { kind = "classifier", features = 64, num_classes = 10 }\n'
    )
    registry = ModelRegistry.from_toml(path)
    registry.configure(ModelStoreConfig(), CollectorRegistry())
    return registry


@pytest.mark.parametrize(("offset", "served"), [(1e-3, False), (1e-6, True)])
def test_optimized_model_serves_only_when_it_matches_eager(
    tmp_path: Path,
    demo_registry_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    offset: float,
    served: bool,
) -> None:
    monkeypatch.setitem(optimize_module.OPTIMIZERS, "compile", lambda m: Skewed(m.module, offset))
    registry = optimized_registry(tmp_path, demo_registry_path)
    try:
        model = registry.ensure("digits").result()
        assert isinstance(model.module, Skewed) is served
        refused = registry._metrics.registry.get_sample_value(
            "inferlane_model_optimization_refused_total",
            {"model": "digits", "reason": "mismatch"},
        )
        assert (refused or 0) == (0 if served else 1)
    finally:
        registry.close()


def test_an_optimizer_that_raises_leaves_eager_serving(
    tmp_path: Path, demo_registry_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(model: Any) -> Any:
        raise RuntimeError("no compiler here")

    monkeypatch.setitem(optimize_module.OPTIMIZERS, "compile", broken)
    registry = optimized_registry(tmp_path, demo_registry_path)
    try:
        model = registry.ensure("digits").result()
        assert model.run([model.adapter.prepare([0.0] * 64)])
        assert (
            registry._metrics.registry.get_sample_value(
                "inferlane_model_optimization_refused_total", {"model": "digits", "reason": "error"}
            )
            == 1
        )
    finally:
        registry.close()


class RightOnlyAtZero(torch.nn.Module):
    """Matches eager on the adapter's all-zero example, and on nothing real."""

    def __init__(self, eager: Any) -> None:
        super().__init__()
        self.eager = eager

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.eager(x) + 0.01 * x.abs().sum(dim=1, keepdim=True)


def test_recorded_real_inputs_refuse_what_the_example_alone_would_pass(
    tmp_path: Path, demo_registry_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(optimize_module.OPTIMIZERS, "compile", lambda m: RightOnlyAtZero(m.module))
    registry = optimized_registry(tmp_path, demo_registry_path)
    try:
        first = registry.ensure("digits").result()
        assert isinstance(first.module, RightOnlyAtZero)  # the zero example cannot tell
        x, _ = digits_test_set()
        registry.record_input("digits", x[0].tolist())  # as the worker does per batch
        path = tmp_path / "registry.toml"
        path.write_text(path.read_text().replace('version = "1"', 'version = "2"'))
        assert registry.reload().replaced == ["digits"]

        second = registry.ensure("digits").result()
        assert second.version == "2" and not isinstance(second.module, RightOnlyAtZero)
        refused = registry._metrics.registry.get_sample_value(
            "inferlane_model_optimization_refused_total", {"model": "digits", "reason": "mismatch"}
        )
        assert refused == 1
    finally:
        registry.close()


@pytest.mark.parametrize("name", ["digits", "minilm"])
def test_traced_demo_models_serve_and_match_eager_on_real_batches(
    demo_registry_path: Path, name: str
) -> None:
    if name == "digits":
        inputs: list[Any] = [row.tolist() for row in digits_test_set()[0][:64]]
    else:
        inputs = demo_sentences(32, seed=3)  # lengths differ: a padded batch
        assert len({len(s.split()) for s in inputs}) > 1
    registry = ModelRegistry.from_toml(demo_registry_path)
    served = registry.get(name)
    eager = load_model(registry.spec(name), served.device, served.adapter)  # not optimized
    assert isinstance(served.module, torch.jit.ScriptModule)
    assert not isinstance(eager.module, torch.jit.ScriptModule)
    for batch in (inputs[:1], inputs):
        items = [served.adapter.prepare(x) for x in batch]
        got, expected = served.forward(items), eager.forward(items)
        assert torch.allclose(got, expected, atol=1e-5), (got - expected).abs().max()
