"""Settings: one validated, frozen section per concern (``WorkerSettings`` holds them),
and the parameter types the sections and the model registry share. Imports nothing
from the stages, so every stage can take its section."""

from worker.settings.sections import (
    BatchConfig,
    ComputeConfig,
    DriftConfig,
    GcConfig,
    KafkaConfig,
    LaneConfig,
    ModelStoreConfig,
    OpsConfig,
    RolloutConfig,
    SchedulingConfig,
    SinkConfig,
    TopicConfig,
    WorkerSettings,
)

__all__ = [
    "BatchConfig",
    "ComputeConfig",
    "DriftConfig",
    "GcConfig",
    "KafkaConfig",
    "LaneConfig",
    "ModelStoreConfig",
    "OpsConfig",
    "RolloutConfig",
    "SchedulingConfig",
    "SinkConfig",
    "TopicConfig",
    "WorkerSettings",
]
