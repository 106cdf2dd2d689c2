"""``DriftTracker``: the worker's drift windows, flushed to SQL and judged when closed.

The event loop counts each finished batch into the in-memory windows as it finishes
(``observe``: a few microseconds per request, whole-batch numpy). The tracker's own
thread wakes every ``flush_s``: it writes the counts (one transaction), stores new
references, evaluates the windows that closed, and runs the sampled reference checks
(a forward pass on another model: never on the loop). A crash loses at most the counts
not yet flushed: windows are a statistic, not a ledger.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
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
from worker.base.blocking import off_loop, own_thread
from worker.base.pending import Batch, Outcome
from worker.drift.accumulate import WindowAccumulator
from worker.drift.evaluate import evaluate
from worker.drift.metrics import DriftMetrics
from worker.drift.observe import Observation, observe
from worker.drift.reference import ReferenceCheck, RunReference, check_batch
from worker.models import Adapter
from worker.settings.drift_thresholds import DriftThresholds

log = logging.getLogger(__name__)

Thresholds = Callable[[str], DriftThresholds]

Queued = tuple[Batch, list[Outcome], datetime]


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
        # Batches sampled for a reference check: appended on the loop, run in the thread.
        self._queue: deque[Queued] = deque()
        self._open: set[WindowKey] = set()  # windows with counts, not yet judged closed
        # The loop counts while the thread takes and judges: the windows' lock. Counting
        # in place costs the loop less than handing each batch to a thread: the GIL
        # serializes the counting either way, and a hand-over adds a switch per batch.
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    def observe(self, batch: Batch, outcomes: list[Outcome]) -> None:
        """On the event loop: count the batch; queue it if a reference check is due."""
        queued = (batch, outcomes, datetime.now(UTC))
        self.absorb([queued], checks=False)
        if self._run_reference is not None and self._thresholds(batch.model).reference_model:
            self._queue.append(queued)

    async def start(self) -> None:
        self._acc.references = await off_loop(load_references, self._engine)
        self._thread = own_thread("drift", self._run)

    async def stop(self) -> None:
        """Run the queued checks, then flush and judge every window touched, closed or not."""
        if self._thread is not None:
            self._stopping.set()
            await off_loop(self._thread.join)
        try:
            await off_loop(self._check_queued)  # what came after the thread's last
            await off_loop(self.flush, final=True)
        except Exception:  # the worker's shutdown goes on: these are statistics
            log.exception("drift windows: last flush failed")

    def _run(self) -> None:
        """The tracker's thread: every ``flush_s``, the queued reference checks and a
        flush, until stop()."""
        while not self._stopping.wait(self._flush_s):
            try:
                self._check_queued()
                self.flush(final=False)
            except Exception:  # unflushed counts stay in memory: written at the next flush
                log.exception("drift windows: update failed")

    def _check_queued(self) -> None:
        while self._queue:
            batch, outcomes, at = self._queue.popleft()
            if self._run_reference is not None:
                self._check(batch, outcomes, at, self._run_reference)

    def absorb(self, queued: list[Queued], *, checks: bool = True) -> None:
        """Count finished batches; with ``checks``, run their sampled reference checks
        here too (blocking: a forward pass)."""
        for batch, outcomes, at in queued:
            obs = observe(batch, outcomes, self._adapter_for(batch.model))
            if obs is not None:
                self.record(obs, at)
            if checks and self._run_reference is not None:
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
        with self._lock:
            for c in checks:
                key = WindowKey(c.model, c.model_version, window_start(c.at, self._acc.window_s))
                self._acc.add_checks(key, 1, int(c.deviant))
                self._open.add(key)
            self._checks += checks

    def record(self, obs: Observation, at: datetime) -> None:
        """Count ``obs`` in the window holding ``at`` (blocking-free)."""
        with self._lock:
            self._open.add(self._acc.add(obs, at))

    def flush(self, *, final: bool) -> None:
        """Blocking: write the counts, store new references, judge closed windows (every
        window touched when ``final``)."""
        with self._lock:
            deltas, refs = self._acc.take()
            checks, self._checks = self._checks, []
        try:
            for ref in refs:
                save_reference(self._engine, ref)  # idempotent: first stored wins
            add_checks(self._engine, [_check_row(c) for c in checks])  # idempotent too
            add_windows(self._engine, deltas, self._acc.window_s)
        except Exception:
            with self._lock:
                self._acc.restore(deltas, refs)
                self._checks[:0] = checks
            raise
        if refs:
            # Another worker may have stored its reference first: use the stored one.
            stored = load_references(self._engine)
            with self._lock:
                self._acc.references = stored
        self._judge(final)

    def _judge(self, final: bool) -> None:
        """Evaluate the windows that closed (all touched ones when ``final``)."""
        grace = timedelta(seconds=2 * self._flush_s)
        now = datetime.now(UTC)
        window = timedelta(seconds=self._acc.window_s)
        with self._lock:
            closed = {k for k in self._open if final or k.window_start + window + grace <= now}
            self._open -= closed
            references = dict(self._acc.references)
        if not closed:
            return
        since = min(k.window_start for k in closed)
        for stats in read_windows(self._engine, since=since):
            key = WindowKey(stats.model, stats.model_version, stats.start)
            if key not in closed:
                continue
            refs = {
                series: ref
                for (model, version, series), ref in references.items()
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
