"""An export program must take every batch the worker sends (1 to ``max_batch``): one
that cannot is refused at load, with the fix, instead of failing batch after batch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from worker.models import ModelSpec
from worker.models.loaders import load_export

Dim = torch.export.Dim


def exported(tmp_path: Path, rows: int, dynamic: Any, max_batch: int = 256) -> ModelSpec:
    model = nn.Sequential(nn.Linear(4, 3)).eval()
    shapes = None if dynamic is None else ({0: dynamic},)
    program = torch.export.export(model, (torch.zeros(rows, 4),), dynamic_shapes=shapes)
    torch.export.save(program, tmp_path / "m.pt2")
    adapter = {"kind": "classifier", "features": 4, "num_classes": 3}
    return ModelSpec.model_validate(
        {"name": "m", "version": "1", "format": "export", "path": tmp_path / "m.pt2"}
        | {"adapter": adapter, "max_batch": max_batch}
    )


@pytest.mark.parametrize(
    ("rows", "dynamic", "message"),
    [
        (1, None, "fixed batch size of 1, .* or set max_batch = 1"),
        (8, None, "fixed batch size of 8, but the worker sends batches of 1 to max_batch"),
        (2, Dim.AUTO, "takes batches of at least 2 items"),
        (2, Dim("batch", max=64), "at most 64 items, below max_batch .256.; set max_batch = 64"),
    ],
)
def test_a_program_that_cannot_take_every_batch_is_refused(
    tmp_path: Path, rows: int, dynamic: Any, message: str
) -> None:
    with pytest.raises(ValueError, match=message) as refused:
        load_export(exported(tmp_path, rows, dynamic))
    assert "dynamic_shapes={'input': {0: torch.export.Dim('batch')}}" in str(refused.value)


@pytest.mark.parametrize(
    ("rows", "dynamic", "max_batch"),
    [(2, Dim("batch"), 256), (2, Dim("batch", min=1, max=64), 64), (1, None, 1)],
)
def test_a_program_that_takes_every_batch_loads(
    tmp_path: Path, rows: int, dynamic: Any, max_batch: int
) -> None:
    module = load_export(exported(tmp_path, rows, dynamic, max_batch))
    for batch in sorted({1, max_batch}):
        assert module(torch.zeros(batch, 4)).shape == (batch, 3)
