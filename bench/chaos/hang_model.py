"""A model factory for chaos runs and tests: a linear regressor that hangs on any input
equal to 7.

The hang lasts until ``RELEASE`` is set (tests set it when they end) or ``HANG_S``
passes (a worker process started by the chaos harness), so no thread outlives its test.
"""

from __future__ import annotations

import threading

import torch
from torch import nn

HANG = 7.0
HANG_S = 600.0
RELEASE = threading.Event()


class HangsOnSeven(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool((x == HANG).any()):
            RELEASE.wait(HANG_S)
        return self.linear(x)


def build() -> nn.Module:
    return HangsOnSeven()
