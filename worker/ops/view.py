"""What the HTTP surface reads from a running worker: a narrow, read-only interface."""

from __future__ import annotations

from typing import Protocol

from consumers.offsets import TopicPartitionKey
from storage import ResultStore
from worker.models import ModelRegistry
from worker.settings import WorkerSettings


class IntakeView(Protocol):
    """Implemented by ``worker.intake.stage.Intake``: what it consumes and holds."""

    @property
    def assignment(self) -> set[TopicPartitionKey]: ...

    def lane_depths(self) -> dict[str, int]: ...

    def in_flight_bytes(self) -> int: ...

    def paused_partitions(self) -> set[TopicPartitionKey]: ...

    async def consumer_lag(self) -> dict[TopicPartitionKey, int]: ...


class WorkerView(Protocol):
    """Implemented by ``worker.facade.Worker``; all reads, cheap, on the event loop."""

    @property
    def settings(self) -> WorkerSettings: ...

    @property
    def models_warm(self) -> bool: ...

    @property
    def store(self) -> ResultStore | None: ...

    @property
    def registry(self) -> ModelRegistry: ...

    @property
    def intake(self) -> IntakeView: ...
