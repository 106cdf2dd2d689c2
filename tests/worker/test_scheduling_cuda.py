"""On a GPU machine: the NVML probe reads the device's utilization. Skipped without CUDA."""

from __future__ import annotations

import time

import pytest
import torch

from worker.scheduling.probes import NvmlProbe, open_probe

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@cuda
def test_the_nvml_probe_sees_the_device_busy_while_kernels_run() -> None:
    probe = open_probe(cuda_index=torch.cuda.current_device(), window_s=1.0, nvml_every_s=0.1)
    try:
        assert isinstance(probe, NvmlProbe)
        a = torch.randn(4096, 4096, device="cuda")
        deadline = time.monotonic() + 30  # a bound on the wait, not a timing assertion
        seen = 0.0
        while seen < 0.5 and time.monotonic() < deadline:
            for _ in range(50):
                a = (a @ a).tanh()
            torch.cuda.synchronize()
            seen = max(seen, probe.utilization(time.monotonic()) or 0.0)
        assert 0.5 <= seen <= 1.0
    finally:
        probe.close()
