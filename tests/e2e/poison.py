"""A model factory for tests: a linear regressor that raises on any input equal to 13."""

from __future__ import annotations

import torch
from torch import nn

POISON = 13.0


class PoisonSensitive(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool((x == POISON).any()):
            raise ValueError("poison value in batch")
        return self.linear(x)


def build() -> nn.Module:
    return PoisonSensitive()
