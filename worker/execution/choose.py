"""Which executor a worker runs its batches on."""

from __future__ import annotations

import torch
from prometheus_client import CollectorRegistry

from worker.execution.cuda_lanes import CudaLaneExecutor
from worker.execution.executor import Executor, ThreadExecutor
from worker.models import ModelRegistry
from worker.scheduling.yield_to_high import YieldToHigh
from worker.settings import ComputeConfig


def choose_executor(
    registry: ModelRegistry,
    config: ComputeConfig,
    metrics: CollectorRegistry,
    yield_to_high: YieldToHigh | None = None,
) -> Executor:
    """Lane streams where the models run on a CUDA device (and the setting allows it),
    the compute thread everywhere else."""
    device = registry.device
    if config.cuda_streams and device.type == "cuda" and torch.cuda.is_available():
        return CudaLaneExecutor.configured(registry, config, metrics, device, yield_to_high)
    return ThreadExecutor.configured(registry, config, metrics, yield_to_high)
