"""The ``jobs`` table: an offline scoring job's parameters, state, checkpoint and counters.

A local job's checkpoint moves inside the transaction that writes its results
(``ResultStore.write(..., also=store.advance(...))``) and only from the value the
writer last saw, so a crashed or cancelled job never counts a row twice.

A process that runs a job writes a heartbeat every ``HEARTBEAT_S`` with the database's
clock, so a reader on any machine can tell a running job from one whose process died:
``running`` with no heartbeat for ``STALE_AFTER_S`` reads as ``interrupted``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, RowMapping, func, insert, select, update

from storage.drift_records import as_utc
from storage.engine import begin_write
from storage.schema import inference_results, jobs

RUNNING, DONE, CANCELLED, FAILED = "running", "done", "cancelled", "failed"
PUBLISHED = "published"  # a distributed job whose chunks are all on Kafka
INTERRUPTED = "interrupted"  # shown, never stored: running, and its process is gone
HEARTBEAT_S = 5.0
# Six missed beats: a process stalled by a busy machine or a long SQL write still counts
# as alive; one killed reads as interrupted half a minute later.
STALE_AFTER_S = 30.0


class JobConflict(Exception):
    """The job is not where this writer left it: cancelled, finished, or taken over."""


@dataclass(frozen=True, slots=True)
class JobRecord:
    name: str
    kind: str
    model: str
    state: str
    params: dict[str, Any]
    rows_total: int | None
    checkpoint: int
    errors: int
    labelled: int
    correct: int
    abs_error_sum: float
    recomputed: int
    created_at: datetime
    updated_at: datetime
    error: str | None  # why it failed
    runner: str | None  # host:pid of the process that runs it, or ran it last
    heartbeat_at: datetime | None
    stale: bool  # no heartbeat for STALE_AFTER_S (by the database's clock)

    @property
    def status(self) -> str:
        """The state to show: ``interrupted`` for a running job whose process is gone
        (run the same command again to resume it)."""
        return INTERRUPTED if self.state == RUNNING and self.stale else self.state


@dataclass(frozen=True, slots=True)
class WindowCounts:
    """What one committed window adds to the job's counters."""

    rows: int
    errors: int = 0
    labelled: int = 0
    correct: int = 0
    abs_error_sum: float = 0.0


class JobStore:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def get(self, name: str) -> JobRecord | None:
        query = select(jobs, func.now().label("db_now")).where(jobs.c.name == name)
        with self._engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        return _record(row) if row is not None else None

    def all(self) -> list[JobRecord]:
        query = select(jobs, func.now().label("db_now")).order_by(jobs.c.created_at)
        with self._engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        return [_record(row) for row in rows]

    def create(
        self, name: str, *, kind: str, model: str, params: dict[str, Any], rows_total: int | None
    ) -> JobRecord:
        now = datetime.now(UTC)
        values: dict[str, Any] = {
            "name": name,
            "kind": kind,
            "model": model,
            "state": RUNNING,
            "params": params,
            "rows_total": rows_total,
            "checkpoint": 0,
            "errors": 0,
            "labelled": 0,
            "correct": 0,
            "abs_error_sum": 0.0,
            "recomputed": 0,
            "created_at": now,
            "updated_at": now,
        }
        with begin_write(self._engine) as conn:
            conn.execute(insert(jobs).values(values))
        record = self.get(name)
        assert record is not None
        return record

    def claim(self, name: str, runner: str) -> None:
        """This process runs the job now (running again if it had failed), with a
        heartbeat; ``JobConflict`` if it was cancelled or finished meanwhile."""
        with begin_write(self._engine) as conn:
            moved = conn.execute(
                update(jobs)
                .where(jobs.c.name == name, jobs.c.state.in_([RUNNING, FAILED]))
                .values(
                    state=RUNNING,
                    error=None,
                    runner=runner[:255],
                    heartbeat_at=func.now(),
                    updated_at=datetime.now(UTC),
                )
            )
        if moved.rowcount != 1:
            raise JobConflict(f"job {name!r} is no longer running or failed")

    def heartbeat(self, name: str) -> None:
        """The running job's process is alive (the database's clock)."""
        with begin_write(self._engine) as conn:
            conn.execute(
                update(jobs)
                .where(jobs.c.name == name, jobs.c.state == RUNNING)
                .values(heartbeat_at=func.now())
            )

    def fail(self, name: str, reason: str) -> None:
        """Mark a running job failed, saying why; a rerun of the same command resumes it."""
        with begin_write(self._engine) as conn:
            conn.execute(
                update(jobs)
                .where(jobs.c.name == name, jobs.c.state == RUNNING)
                .values(state=FAILED, error=reason, updated_at=datetime.now(UTC))
            )

    def release(self, name: str) -> None:
        """Its process stops without finishing (Ctrl-C): interrupted from now on."""
        self._update(name, heartbeat_at=None)

    def advance(self, name: str, start: int, counts: WindowCounts) -> Callable[[Connection], None]:
        """A step for the results transaction: checkpoint ``start`` → ``start + rows``."""

        def step(conn: Connection) -> None:
            moved = conn.execute(
                update(jobs)
                .where(jobs.c.name == name, jobs.c.state == RUNNING, jobs.c.checkpoint == start)
                .values(
                    checkpoint=start + counts.rows,
                    errors=jobs.c.errors + counts.errors,
                    labelled=jobs.c.labelled + counts.labelled,
                    correct=jobs.c.correct + counts.correct,
                    abs_error_sum=jobs.c.abs_error_sum + counts.abs_error_sum,
                    updated_at=datetime.now(UTC),
                )
            )
            if moved.rowcount != 1:
                raise JobConflict(f"job {name!r} is no longer running at row {start}")

        return step

    def add_recomputed(self, name: str, rows: int) -> None:
        self._update(name, recomputed=jobs.c.recomputed + rows)

    def finish(self, name: str, **values: Any) -> None:
        self._update(name, state=DONE, **values)

    def cancel(self, name: str) -> bool:
        """Mark a running, failed or published job cancelled; False if there is none by
        that name."""
        with begin_write(self._engine) as conn:
            moved = conn.execute(
                update(jobs)
                .where(jobs.c.name == name, jobs.c.state.in_([RUNNING, FAILED, PUBLISHED]))
                .values(state=CANCELLED, updated_at=datetime.now(UTC))
            )
        return moved.rowcount == 1

    def published(self, name: str) -> None:
        """A running distributed job has every chunk on Kafka (its chunks may all be
        done already: then it stays done)."""
        with begin_write(self._engine) as conn:
            conn.execute(
                update(jobs)
                .where(jobs.c.name == name, jobs.c.state == RUNNING)
                .values(state=PUBLISHED, updated_at=datetime.now(UTC))
            )

    def _update(self, name: str, **values: Any) -> None:
        with begin_write(self._engine) as conn:
            conn.execute(
                update(jobs)
                .where(jobs.c.name == name)
                .values(updated_at=datetime.now(UTC), **values)
            )

    def result_counts(self, name: str) -> dict[str, int]:
        """``{status: rows}`` of the job's results (request ids ``"{name}:{row}"``)."""
        query = (
            select(inference_results.c.status, func.count())
            .where(inference_results.c.request_id.startswith(f"{name}:", autoescape=True))
            .group_by(inference_results.c.status)
        )
        with self._engine.connect() as conn:
            return {status: int(n) for status, n in conn.execute(query)}

    def results(self, name: str) -> list[tuple[int, str, Any, str | None]]:
        """``(row, status, outputs, error_message)`` of the job's results, in row order."""
        prefix = f"{name}:"
        query = select(
            inference_results.c.request_id,
            inference_results.c.status,
            inference_results.c.outputs,
            inference_results.c.error_message,
        ).where(inference_results.c.request_id.startswith(prefix, autoescape=True))
        with self._engine.connect() as conn:
            rows = [
                (int(rid[len(prefix) :]), status, outputs, message)
                for rid, status, outputs, message in conn.execute(query)
            ]
        rows.sort(key=lambda r: r[0])
        return rows


def stale(now: datetime, beat: datetime | None) -> bool:
    """No heartbeat for ``STALE_AFTER_S`` at the database's time ``now``."""
    return beat is None or as_utc(now) - as_utc(beat) > timedelta(seconds=STALE_AFTER_S)


def _record(row: RowMapping) -> JobRecord:
    values = dict(row)
    now = values.pop("db_now")
    return JobRecord(**values, stale=stale(now, values["heartbeat_at"]))
