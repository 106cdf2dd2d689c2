"""``DriftTracker``: the worker's drift windows, flushed to SQL and judged when closed.

The event loop only queues finished batches (``observe``); a task takes them in a
thread, adds them to the in-memory windows, and every ``flush_s`` writes the counts
(one transaction), stores new references, and evaluates the windows that closed. A
crash loses at most the counts not yet flushed: windows are a statistic, not a ledger.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine

from storage.drift_records import WindowKey
from storage.drift_windows import (
    add_windows,
    load_references,
    read_windows,
    record_flag,
    save_reference,
)
from worker.drift.accumulate import WindowAccumulator
from worker.drift.evaluate import evaluate
from worker.drift.metrics import DriftMetrics
from worker.drift.observe import Observation, observe
from worker.drift.thresholds import DriftThresholds
from worker.models import Adapter
from worker.pending import Batch, Outcome

log = logging.getLogger(__name__)

Thresholds = Callable[[str], DriftThresholds]


class DriftTracker:
    def __init__(
        self,
        engine: Engine,
        *,
        window_s: int,
        reference_rows: int,
        bins: int,
        flush_s: float,
        adapter_for: Callable[[str], Adapter],
        thresholds: Thresholds,
        metrics: DriftMetrics,
    ) -> None:
        self._engine = engine
        self._acc = WindowAccumulator(window_s=window_s, reference_rows=reference_rows, bins=bins)
        self._flush_s = flush_s
        self._adapter_for = adapter_for
        self._thresholds = thresholds
        self._metrics = metrics
        self._queue: list[tuple[Batch, list[Outcome], datetime]] = []
        self._ready = asyncio.Event()
        self._open: set[WindowKey] = set()  # windows with counts, not yet judged closed
        self._task: asyncio.Task[None] | None = None

    def observe(self, batch: Batch, outcomes: list[Outcome]) -> None:
        """On the event loop: queue only; the work happens in the tracker's thread."""
        self._queue.append((batch, outcomes, datetime.now(UTC)))
        self._ready.set()

    async def start(self) -> None:
        self._acc.references = await asyncio.to_thread(load_references, self._engine)
        self._task = asyncio.create_task(self._run(), name="inferlane-drift")

    async def stop(self) -> None:
        """Flush what is queued and judge every window touched, closed or not."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        queued, self._queue = self._queue, []
        await asyncio.to_thread(self._absorb, queued)
        await asyncio.to_thread(self.flush, final=True)

    async def _run(self) -> None:
        next_flush = time.monotonic() + self._flush_s
        while True:
            timeout = max(0.0, next_flush - time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ready.wait(), timeout)
            self._ready.clear()
            queued, self._queue = self._queue, []
            if queued:
                await asyncio.to_thread(self._absorb, queued)
            if time.monotonic() >= next_flush:
                next_flush = time.monotonic() + self._flush_s
                try:
                    await asyncio.to_thread(self.flush, final=False)
                except Exception:  # the counts stay queued in memory: retried next flush
                    log.exception("drift windows: flush failed")

    def _absorb(self, queued: list[tuple[Batch, list[Outcome], datetime]]) -> None:
        for batch, outcomes, at in queued:
            obs = observe(batch, outcomes, self._adapter_for(batch.model))
            if obs is not None:
                self.record(obs, at)

    def record(self, obs: Observation, at: datetime) -> None:
        """Count ``obs`` in the window holding ``at`` (blocking-free, thread side)."""
        self._open.add(self._acc.add(obs, at))

    def flush(self, *, final: bool) -> None:
        """Blocking: write the counts, store new references, judge closed windows (every
        window touched when ``final``)."""
        deltas, refs = self._acc.take()
        try:
            for ref in refs:
                save_reference(self._engine, ref)  # idempotent: first stored wins
            add_windows(self._engine, deltas, self._acc.window_s)
        except Exception:
            self._acc.restore(deltas, refs)
            raise
        if refs:
            # Another worker may have stored its reference first: use the stored one.
            self._acc.references = load_references(self._engine)
        self._judge(final)

    def _judge(self, final: bool) -> None:
        """Evaluate the windows that closed (all touched ones when ``final``)."""
        grace = timedelta(seconds=2 * self._flush_s)
        now = datetime.now(UTC)
        window = timedelta(seconds=self._acc.window_s)
        closed = {k for k in self._open if final or k.window_start + window + grace <= now}
        if not closed:
            return
        self._open -= closed
        since = min(k.window_start for k in closed)
        for stats in read_windows(self._engine, since=since):
            key = WindowKey(stats.model, stats.model_version, stats.start)
            if key not in closed:
                continue
            refs = {
                series: ref
                for (model, version, series), ref in self._acc.references.items()
                if (model, version) == (key.model, key.model_version)
            }
            verdict = evaluate(stats, refs, self._thresholds(key.model))
            for metric, value in verdict.metrics.items():
                if value is not None:
                    self._metrics.value.labels(key.model, metric).set(value)
            for c in verdict.crossings:
                if record_flag(self._engine, key, c.metric, c.value, c.threshold):
                    self._metrics.flags.labels(key.model, c.metric).inc()
                    log.warning(
                        "drift: %s %s window %s: %s = %.3f > %.3f",
                        key.model,
                        key.model_version,
                        key.window_start.isoformat(),
                        c.metric,
                        c.value,
                        c.threshold,
                    )
