"""What the worker runs for drift: the window tracker and the late-labels consumer.

The worker's facade holds one ``Drift`` and calls it at three points: start, each
finished batch (``observe``), stop.
"""

from __future__ import annotations

from sqlalchemy import Engine

from worker.config import WorkerSettings
from worker.drift.metrics import DriftMetrics
from worker.drift.thresholds import DriftThresholds
from worker.drift.tracker import DriftTracker
from worker.metrics import WorkerMetrics
from worker.models import ModelRegistry
from worker.pending import Batch, Outcome


class Drift:
    def __init__(self, tracker: DriftTracker) -> None:
        self._tracker = tracker

    @classmethod
    async def start(
        cls,
        settings: WorkerSettings,
        engine: Engine,
        registry: ModelRegistry,
        metrics: WorkerMetrics,
    ) -> Drift | None:
        """None when drift is disabled."""
        config = settings.drift
        if not config.enabled:
            return None

        def thresholds(model: str) -> DriftThresholds:
            return registry.spec(model).drift or config.thresholds

        tracker = DriftTracker(
            engine,
            window_s=config.window_s,
            reference_rows=config.reference_rows,
            bins=config.bins,
            flush_s=config.flush_s,
            adapter_for=registry.adapter,
            thresholds=thresholds,
            metrics=DriftMetrics(metrics.registry),
        )
        await tracker.start()
        return cls(tracker)

    def observe(self, batch: Batch, outcomes: list[Outcome]) -> None:
        self._tracker.observe(batch, outcomes)

    async def stop(self) -> None:
        await self._tracker.stop()
