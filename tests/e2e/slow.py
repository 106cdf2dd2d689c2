"""A test model that stalls on one input: a batch holding ``STALL`` takes ``STALL_S``."""

from __future__ import annotations

import time

import torch
from torch import nn

STALL = 99.0
STALL_S = 20.0


class Stalling(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool((x == STALL).any()):
            time.sleep(STALL_S)
        return self.linear(x).squeeze(-1)


def build() -> nn.Module:
    return Stalling()
