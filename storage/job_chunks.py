"""A distributed job's chunks: who holds each one, how far it got, and its part files.

A chunk is a row range of the job's input. One worker holds it at a time: a claim
takes a pending chunk, or a running one whose holder stopped beating (no heartbeat for
``STALE_AFTER_S``, by the database's clock), and counts one more ``attempt``. Every
write of a holder names its attempt, so a worker that lost its claim commits nothing.
A window's results, its part files, the chunk's checkpoint and the job's counters move
in one transaction (``commit_window``); the window that ends the last chunk marks the
job done.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    RowMapping,
    and_,
    func,
    insert,
    select,
    update,
)

from storage.engine import begin_write
from storage.jobs import FAILED, PUBLISHED, RUNNING, JobConflict, WindowCounts, stale
from storage.schema import job_chunks, job_parts, jobs

PENDING, DONE = "pending", "done"
STALLED = "stalled"  # shown, never stored: running, and its holder stopped beating
_GOING = (RUNNING, PUBLISHED)  # job states whose chunks may run
_PENDING_LOOKS = 8  # pending chunks a worker looks at for one to take


@dataclass(frozen=True, slots=True)
class Span:
    start: int
    rows: int


@dataclass(frozen=True, slots=True)
class Claim:
    """A chunk held by this worker: rows ``checkpoint .. end`` are still to commit."""

    job: str
    chunk: int
    start: int
    rows: int
    checkpoint: int
    attempt: int

    @property
    def end(self) -> int:
        return self.start + self.rows


@dataclass(frozen=True, slots=True)
class Part:
    """A committed window: its rows and the names of its part files (None: no rows)."""

    start: int
    rows: int
    output: str | None
    errors: str | None


@dataclass(frozen=True, slots=True)
class ChunkStates:
    """How a job's chunks stand: ``{state: chunks}`` (``running`` ones whose holder is
    gone as ``stalled``), chunks taken over from another worker, the first failure."""

    counts: dict[str, int]
    taken_over: int
    failure: str | None

    @property
    def total(self) -> int:
        return sum(self.counts.values())


class ChunkStore:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def add(self, job: str, spans: Sequence[Span]) -> None:
        """The job's chunks, numbered in row order, unless it has them already (a rerun
        keeps the first plan)."""
        now = datetime.now(UTC)
        rows = [
            {
                "job": job,
                "chunk": i,
                "start": s.start,
                "rows": s.rows,
                "checkpoint": s.start,
                "state": PENDING,
                "attempt": 0,
                "updated_at": now,
            }
            for i, s in enumerate(spans)
        ]
        with begin_write(self._engine) as conn:
            planned = conn.execute(select(func.count()).where(job_chunks.c.job == job))
            if rows and not planned.scalar_one():
                conn.execute(insert(job_chunks), rows)

    def unfinished(self, job: str) -> list[tuple[int, Span, int]]:
        """``(chunk, span, checkpoint)`` of each chunk not done; failed ones are pending
        again (a rerun of the job's command retries them)."""
        c = job_chunks.c
        with begin_write(self._engine) as conn:
            conn.execute(
                update(job_chunks)
                .where(c.job == job, c.state == FAILED)
                .values(state=PENDING, error=None, updated_at=datetime.now(UTC))
            )
            rows = conn.execute(
                select(c.chunk, c.start, c.rows, c.checkpoint)
                .where(c.job == job, c.state != DONE)
                .order_by(c.chunk)
            ).all()
        return [(chunk, Span(start, n), checkpoint) for chunk, start, n, checkpoint in rows]

    def claim(self, job: str, chunk: int, runner: str) -> Claim | None:
        """Hold the chunk if it is pending, or running without a heartbeat, and its job
        is going; None if it is done, failed, held by a live worker, or the job stopped."""
        c = job_chunks.c
        query = (
            select(job_chunks, jobs.c.state.label("job_state"), func.now().label("db_now"))
            .join(jobs, jobs.c.name == c.job)
            .where(c.job == job, c.chunk == chunk)
        )
        with begin_write(self._engine) as conn:
            row = conn.execute(query).mappings().first()
            if row is None or not _takeable(row):
                return None
            moved = conn.execute(
                update(job_chunks)
                .where(
                    c.job == job,
                    c.chunk == chunk,
                    c.attempt == row["attempt"],
                    c.state == row["state"],
                )
                .values(
                    state=RUNNING,
                    attempt=c.attempt + 1,
                    runner=runner[:255],
                    heartbeat_at=func.now(),
                    error=None,
                    updated_at=datetime.now(UTC),
                )
            )
        if moved.rowcount != 1:
            return None
        return Claim(job, chunk, row["start"], row["rows"], row["checkpoint"], row["attempt"] + 1)

    def takeable(self) -> list[tuple[str, int]]:
        """``(job, chunk)`` of the chunks a worker may claim without a descriptor: pending
        ones, and running ones whose holder stopped beating, of the jobs still going. A
        worker whose partitions have nothing left takes them, so no worker idles while
        another has chunks queued, and a dead worker's chunk is taken over."""
        c = job_chunks.c
        query = (
            select(job_chunks, jobs.c.state.label("job_state"), func.now().label("db_now"))
            .join(jobs, jobs.c.name == c.job)
            .where(jobs.c.state.in_(_GOING))
            .order_by(jobs.c.created_at, c.chunk)
        )
        with self._engine.connect() as conn:
            # Running chunks are at most one per worker; pending ones, the first few.
            rows = [
                *conn.execute(query.where(c.state == RUNNING)).mappings(),
                *conn.execute(query.where(c.state == PENDING).limit(_PENDING_LOOKS)).mappings(),
            ]
        return [(r["job"], r["chunk"]) for r in rows if _takeable(r)]

    def release(self, claim: Claim) -> None:
        """The holder stops before the chunk's end (its worker shuts down): another worker
        may take the chunk over at once, from its checkpoint."""
        with begin_write(self._engine) as conn:
            conn.execute(update(job_chunks).where(_held(claim)).values(heartbeat_at=None))

    def heartbeat(self, claim: Claim) -> bool:
        """The holder is alive; False if the claim was lost (taken over, job stopped)."""
        with begin_write(self._engine) as conn:
            moved = conn.execute(
                update(job_chunks).where(_held(claim)).values(heartbeat_at=func.now())
            )
        return moved.rowcount == 1

    def commit_window(
        self,
        claim: Claim,
        start: int,
        counts: WindowCounts,
        part: Part,
        *,
        last: bool,
    ) -> Callable[[Connection], None]:
        """A step for the window's results transaction: the chunk's checkpoint moves
        ``start`` → ``start + rows`` (done when ``last``), the window's part files are
        recorded, the job's counters grow, and the job is done when no chunk is left.
        ``JobConflict`` (rolling everything back) if the claim was lost or the job
        stopped."""

        def step(conn: Connection) -> None:
            now = datetime.now(UTC)
            moved = conn.execute(
                update(job_chunks)
                .where(_held(claim), job_chunks.c.checkpoint == start)
                .values(
                    checkpoint=start + counts.rows,
                    state=DONE if last else RUNNING,
                    heartbeat_at=func.now(),
                    updated_at=now,
                )
            )
            if moved.rowcount != 1:
                raise JobConflict(f"chunk {claim.chunk} of job {claim.job!r} is no longer ours")
            if counts.rows:
                conn.execute(
                    insert(job_parts).values(
                        job=claim.job,
                        start=start,
                        rows=counts.rows,
                        attempt=claim.attempt,
                        output=part.output,
                        errors=part.errors,
                    )
                )
            # The job's row is locked from here to the commit, so of two workers ending
            # the last two chunks at once, the second one counts after the first commits.
            moved = conn.execute(
                update(jobs)
                .where(jobs.c.name == claim.job, jobs.c.state.in_(_GOING))
                .values(
                    checkpoint=jobs.c.checkpoint + counts.rows,
                    errors=jobs.c.errors + counts.errors,
                    labelled=jobs.c.labelled + counts.labelled,
                    correct=jobs.c.correct + counts.correct,
                    abs_error_sum=jobs.c.abs_error_sum + counts.abs_error_sum,
                    updated_at=now,
                )
            )
            if moved.rowcount != 1:
                raise JobConflict(f"job {claim.job!r} is no longer running")
            if last and not _chunks_left(conn, claim.job):
                conn.execute(update(jobs).where(jobs.c.name == claim.job).values(state=DONE))

        return step

    def fail(self, claim: Claim, reason: str) -> None:
        """The chunk raised: failed, with the reason (a rerun of the job retries it)."""
        with begin_write(self._engine) as conn:
            conn.execute(
                update(job_chunks)
                .where(_held(claim))
                .values(state=FAILED, error=reason, updated_at=datetime.now(UTC))
            )

    def states(self, job: str) -> ChunkStates:
        c = job_chunks.c
        query = select(
            c.state, c.attempt, c.heartbeat_at, c.error, func.now().label("db_now")
        ).where(c.job == job)
        counts: Counter[str] = Counter()
        taken_over, failure = 0, None
        with self._engine.connect() as conn:
            for row in conn.execute(query.order_by(c.chunk)).mappings():
                state = row["state"]
                if state == RUNNING and stale(row["db_now"], row["heartbeat_at"]):
                    state = STALLED
                counts[state] += 1
                taken_over += max(0, row["attempt"] - 1)
                if state == FAILED and failure is None:
                    failure = row["error"]
        return ChunkStates(dict(counts), taken_over, failure)

    def parts(self, job: str) -> list[Part]:
        """The committed windows' part files, in row order."""
        p = job_parts.c
        query = select(p.start, p.rows, p.output, p.errors).where(p.job == job).order_by(p.start)
        with self._engine.connect() as conn:
            return [Part(*row) for row in conn.execute(query)]


def _takeable(row: RowMapping) -> bool:
    if row["job_state"] not in _GOING:
        return False
    if row["state"] == PENDING:
        return True
    return bool(row["state"] == RUNNING and stale(row["db_now"], row["heartbeat_at"]))


def _held(claim: Claim) -> ColumnElement[bool]:
    """The chunk's row while this claim holds it."""
    c = job_chunks.c
    return and_(
        c.job == claim.job,
        c.chunk == claim.chunk,
        c.attempt == claim.attempt,
        c.state == RUNNING,
    )


def _chunks_left(conn: Connection, job: str) -> int:
    query = select(func.count()).where(job_chunks.c.job == job, job_chunks.c.state != DONE)
    return int(conn.execute(query).scalar_one())
