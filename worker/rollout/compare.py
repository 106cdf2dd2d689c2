"""The rollout's thread: count finished batches per version, and run a sample of them
on the other version too, to measure how far the two disagree.

The event loop only queues a finished batch (``submit``); when the queue is full the
batch is dropped from the statistics (counted), never waited for. Shadow rollouts
run sampled primary batches on the candidate (whose outputs go nowhere else); canary
rollouts run sampled candidate batches on the primary. A sampled batch runs whole, so
both versions' compute times are for the same inputs; it runs on the executor, in the
low lane, so it yields to the lanes that serve requests like any bulk batch.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from pydantic import JsonValue

from consumers.contract import Status
from consumers.errors import BadInput
from worker.base.blocking import own_thread
from worker.base.pending import Batch, Outcome, Pending
from worker.execution.aside import Submit, run_aside
from worker.models import Adapter
from worker.rollout.stats import VersionStats
from worker.settings.rollout_plan import Mode

log = logging.getLogger(__name__)


class Role(StrEnum):
    PRIMARY = "primary"
    CANDIDATE = "candidate"


@dataclass(frozen=True, slots=True)
class Active:
    """A running rollout, as the worker observes it."""

    rollout_id: int
    model: str
    candidate: str  # registry key of the candidate version
    mode: Mode
    sample: float


class Comparer:
    def __init__(
        self,
        submit: Submit,
        adapter_for: Callable[[str], Adapter],
        *,
        max_queued: int,
        on_drop: Callable[[str], None] = lambda _: None,
        seed: int | None = None,
    ) -> None:
        self._submit = submit
        self._adapter_for = adapter_for
        self._on_drop = on_drop
        self._random = random.Random(seed)
        self._queue: queue.Queue[tuple[Active, Batch, list[Outcome]] | None] = queue.Queue(
            max_queued
        )
        self._lock = threading.Lock()
        self._deltas: dict[tuple[int, Role], VersionStats] = {}
        self._idle = threading.Condition(self._lock)
        self._busy = 0
        self._thread = own_thread("rollout", self._loop)

    def submit(self, rollout: Active, batch: Batch, outcomes: list[Outcome]) -> None:
        try:
            self._queue.put_nowait((rollout, batch, outcomes))
        except queue.Full:
            self._on_drop(rollout.model)

    def take(self) -> dict[tuple[int, Role], VersionStats]:
        """The counts added since the last call, per rollout and role."""
        with self._lock:
            deltas, self._deltas = self._deltas, {}
        return deltas

    def drain(self, timeout_s: float) -> None:
        """Until the queued batches are counted (tests and shutdown)."""
        deadline = time.monotonic() + timeout_s
        with self._idle:
            self._idle.wait_for(
                lambda: self._queue.empty() and not self._busy,
                max(0.0, deadline - time.monotonic()),
            )

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while (job := self._queue.get()) is not None:
            with self._lock:
                self._busy += 1
            try:
                self._observe(*job)
            except Exception:  # statistics must never take the worker down
                log.exception("rollout statistics for %s failed", job[0].model)
            finally:
                with self._idle:
                    self._busy -= 1
                    self._idle.notify_all()

    def _observe(self, rollout: Active, batch: Batch, outcomes: list[Outcome]) -> None:
        role = Role.CANDIDATE if batch.model == rollout.candidate else Role.PRIMARY
        served = VersionStats()
        ok: list[tuple[Pending, JsonValue]] = []
        for pending, outcome in zip(batch.items, outcomes, strict=True):
            result = outcome.result
            if result is None:
                continue
            served.requests += 1
            served.add_latency(result.latency_ms.compute)
            if result.status != Status.OK:
                served.errors += 1
                continue
            ok.append((pending, result.outputs))
            if outcome.drift is not None:
                served.add_label(outcome.drift.error)
        self._add(rollout.rollout_id, role, served)
        compares = Role.PRIMARY if rollout.mode == Mode.SHADOW else Role.CANDIDATE
        if ok and role == compares and self._random.random() < rollout.sample:
            self._compare(rollout, role, batch.model, ok)

    def _compare(
        self,
        rollout: Active,
        role: Role,
        served_key: str,
        ok: list[tuple[Pending, JsonValue]],
    ) -> None:
        other_role = Role.PRIMARY if role == Role.CANDIDATE else Role.CANDIDATE
        other_key = rollout.model if other_role == Role.PRIMARY else rollout.candidate
        adapter = self._adapter_for(served_key)
        run = run_aside(self._submit, other_key, [p for p, _ in ok])
        ms = run.compute_s * 1000
        other, candidate = VersionStats(), VersionStats()
        for (pending, served_output), result in zip(ok, run.results, strict=True):
            other.requests += 1
            other.add_latency(ms)
            if result.error is not None:
                other.errors += 1
                continue
            output = result.outputs
            candidate.compared += 1  # disagreement is symmetric: the order does not matter
            candidate.disagreement_sum += adapter.disagreement(output, served_output)
            expected = pending.request.expected
            if expected is not None:
                try:
                    label = adapter.drift(output, expected)
                except (BadInput, ValueError):
                    label = None
                if label is not None:
                    other.add_label(label.error)
        self._add(rollout.rollout_id, other_role, other)
        self._add(rollout.rollout_id, Role.CANDIDATE, candidate)

    def _add(self, rollout_id: int, role: Role, stats: VersionStats) -> None:
        with self._lock:
            self._deltas.setdefault((rollout_id, role), VersionStats()).merge(stats)
