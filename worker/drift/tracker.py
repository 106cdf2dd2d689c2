"""``DriftTracker``: the worker's drift windows, flushed to SQL and judged when closed.

The event loop only queues finished batches (``observe``); every tick (0.1 s) a task
hands what gathered to a thread in one hop, which adds it to the in-memory windows and,
every ``flush_s``, writes the counts (one transaction), stores new references, and
evaluates the windows that closed. A crash loses at most the counts not yet flushed:
windows are a statistic, not a ledger.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine

from storage.drift_records import WindowKey, window_start
from storage.drift_windows import (
    add_windows,
    load_references,
    read_windows,
    record_flag,
    save_reference,
)
from storage.reference_checks import add_checks
from worker.drift.accumulate import WindowAccumulator
from worker.drift.evaluate import evaluate
from worker.drift.metrics import DriftMetrics
from worker.drift.observe import Observation, observe
from worker.drift.reference import ReferenceCheck, RunReference, check_batch
from worker.drift.thresholds import DriftThresholds
from worker.models import Adapter
from worker.pending import Batch, Outcome

log = logging.getLogger(__name__)

Thresholds = Callable[[str], DriftThresholds]

# Batches gather this long on the event loop, then cross to the thread together: one
# hop per tick instead of one per batch (tens a second at full load).
_TICK_S = 0.1


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
        run_reference: RunReference | None = None,
    ) -> None:
        self._engine = engine
        self._acc = WindowAccumulator(window_s=window_s, reference_rows=reference_rows, bins=bins)
        self._flush_s = flush_s
        self._adapter_for = adapter_for
        self._thresholds = thresholds
        self._metrics = metrics
        self._run_reference = run_reference
        self._checks: list[ReferenceCheck] = []  # not yet stored
        self._queue: list[tuple[Batch, list[Outcome], datetime]] = []
        self._open: set[WindowKey] = set()  # windows with counts, not yet judged closed
        self._task: asyncio.Task[None] | None = None
        # A cancelled await leaves its thread running: stop() must not overlap with it.
        self._lock = threading.Lock()

    def observe(self, batch: Batch, outcomes: list[Outcome]) -> None:
        """On the event loop: queue only; the work happens in the tracker's thread."""
        self._queue.append((batch, outcomes, datetime.now(UTC)))

    async def start(self) -> None:
        self._acc.references = await asyncio.to_thread(load_references, self._engine)
        self._task = asyncio.create_task(self._run(), name="inferlane-drift")

    async def stop(self) -> None:
        """Flush what is queued and judge every window touched, closed or not."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        queued, self._queue = self._queue, []
        try:
            await asyncio.to_thread(self.absorb, queued)
            await asyncio.to_thread(self.flush, final=True)
        except Exception:  # the worker's shutdown goes on: these are statistics
            log.exception("drift windows: last flush failed")

    async def _run(self) -> None:
        next_flush = time.monotonic() + self._flush_s
        tick_s = min(_TICK_S, self._flush_s)
        while True:
            await asyncio.sleep(tick_s)
            queued, self._queue = self._queue, []
            due = time.monotonic() >= next_flush
            if due:
                next_flush = time.monotonic() + self._flush_s
            if not (queued or due):
                continue
            try:
                await asyncio.to_thread(self._step, queued, due)
            except Exception:  # unflushed counts stay in memory: written at the next flush
                log.exception("drift windows: update failed")

    def _step(self, queued: list[tuple[Batch, list[Outcome], datetime]], flush: bool) -> None:
        """Thread side, one hop: count the batches, then flush when due."""
        with self._lock:
            self._absorb(queued)
            if flush:
                self._flush(final=False)

    def absorb(self, queued: list[tuple[Batch, list[Outcome], datetime]]) -> None:
        """Thread side: count finished batches (and run the sampled reference checks)."""
        with self._lock:
            self._absorb(queued)

    def _absorb(self, queued: list[tuple[Batch, list[Outcome], datetime]]) -> None:
        for batch, outcomes, at in queued:
            obs = observe(batch, outcomes, self._adapter_for(batch.model))
            if obs is not None:
                self.record(obs, at)
            if self._run_reference is not None:
                self._check(batch, outcomes, at, self._run_reference)

    def _check(
        self, batch: Batch, outcomes: list[Outcome], at: datetime, run: RunReference
    ) -> None:
        try:
            checks = check_batch(batch, outcomes, self._thresholds(batch.model), run, at)
        except Exception:  # a failing reference must not stop the drift windows
            log.exception("reference model for %s failed", batch.model)
            return
        self.record_checks(checks)

    def record_checks(self, checks: list[ReferenceCheck]) -> None:
        """Count reference checks in their windows; they are stored at the next flush."""
        for c in checks:
            key = WindowKey(c.model, c.model_version, window_start(c.at, self._acc.window_s))
            self._acc.add_checks(key, 1, int(c.deviant))
            self._open.add(key)
        self._checks += checks

    def record(self, obs: Observation, at: datetime) -> None:
        """Count ``obs`` in the window holding ``at`` (blocking-free, thread side)."""
        self._open.add(self._acc.add(obs, at))

    def flush(self, *, final: bool) -> None:
        """Blocking: write the counts, store new references, judge closed windows (every
        window touched when ``final``)."""
        with self._lock:
            self._flush(final)

    def _flush(self, final: bool) -> None:
        deltas, refs = self._acc.take()
        checks, self._checks = self._checks, []
        try:
            for ref in refs:
                save_reference(self._engine, ref)  # idempotent: first stored wins
            add_checks(self._engine, [_check_row(c) for c in checks])  # idempotent too
            add_windows(self._engine, deltas, self._acc.window_s)
        except Exception:
            self._acc.restore(deltas, refs)
            self._checks[:0] = checks
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


def _check_row(c: ReferenceCheck) -> dict[str, object]:
    return {
        "request_id": c.request_id,
        "model": c.model,
        "model_version": c.model_version,
        "reference_model": c.reference_model,
        "deviation": c.deviation,
        "tolerance": c.tolerance,
        "created_at": c.at,
    }
