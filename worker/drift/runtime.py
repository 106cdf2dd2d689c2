"""What the worker runs for drift: the window tracker and the late-labels consumer.

The worker's facade holds one ``Drift`` and calls it at three points: start, each
finished batch (``observe``), stop.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from pydantic import JsonValue
from sqlalchemy import Engine

from worker.base.pending import Batch, BatchRun, Labelled, Outcome, Pending
from worker.drift.labels import LabelJoiner
from worker.drift.metrics import DriftMetrics
from worker.drift.tracker import DriftTracker
from worker.execution.aside import Submit, run_aside
from worker.models import ModelRegistry
from worker.ops.metrics import WorkerMetrics
from worker.settings import WorkerSettings
from worker.settings.drift_thresholds import DriftThresholds


class Drift:
    def __init__(self, tracker: DriftTracker, labels: LabelJoiner | None) -> None:
        self._tracker = tracker
        self._labels = labels

    @classmethod
    async def start(
        cls,
        settings: WorkerSettings,
        engine: Engine,
        registry: ModelRegistry,
        metrics: WorkerMetrics,
        *,
        compute_on: Submit,
    ) -> Drift | None:
        """None when drift is disabled. ``compute_on``: the executor's ``submit``, where
        reference checks run on the low lane."""
        config = settings.drift
        if not config.enabled:
            return None

        def thresholds(model: str) -> DriftThresholds:
            return registry.spec(model).drift or config.thresholds

        drift_metrics = DriftMetrics(metrics.registry)
        tracker = DriftTracker(
            engine,
            window_s=config.window_s,
            reference_rows=config.reference_rows,
            bins=config.bins,
            flush_s=config.flush_s,
            adapter_for=registry.adapter,
            thresholds=thresholds,
            metrics=drift_metrics,
            run_reference=functools.partial(_on_executor, compute_on),
        )
        await tracker.start()
        labels = None
        if config.labels_topic is not None and settings.bootstrap is not None:

            def pair(model: str, outputs: Any, expected: Any) -> Labelled | None:
                return registry.adapter(model).drift(outputs, expected)

            labels = LabelJoiner(
                engine,
                bootstrap=settings.bootstrap,
                topic=config.labels_topic,
                group_id=f"{settings.kafka.group_id}.labels",
                client_id=settings.kafka.client_id,
                dead_letter_topic=settings.topics.dead_letters,
                max_request_bytes=settings.kafka.max_request_bytes,
                partitions=settings.topics.partitions,
                window_s=config.window_s,
                wait_s=config.label_wait_s,
                pair=pair,
                metrics=drift_metrics,
            )
            await labels.start()
        return cls(tracker, labels)

    def observe(self, batch: Batch, outcomes: list[Outcome]) -> None:
        self._tracker.observe(batch, outcomes)

    def batch_done(self, batch: Batch, run: BatchRun, outcomes: Sequence[Outcome]) -> None:
        self._tracker.observe(batch, list(outcomes))

    async def stop(self) -> None:
        if self._labels is not None:
            await self._labels.stop()
        await self._tracker.stop()


def _on_executor(submit: Submit, model: str, served: list[Pending]) -> list[JsonValue]:
    """A reference check's forward pass, on the executor's low lane; a request the
    reference model fails fails the check (the tracker logs it)."""
    run = run_aside(submit, model, served)
    failed = next((r.error for r in run.results if r.error is not None), None)
    if failed is not None:
        raise RuntimeError(f"{failed.code}: {failed.message}")
    return [r.outputs for r in run.results]
