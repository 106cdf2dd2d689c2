"""The rollout tables: each rollout of a candidate version, its decisions, its measurements.

Several workers follow one rollout. Each decision is an update from the revision its
writer read (``decide``): the first to land takes it, the others get ``None`` and read
the rollout again. Measurements are per worker (``record_stats``): each worker
overwrites its own row of the interval, and readers add the rows up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from storage.drift_records import as_utc
from storage.engine import begin_write
from storage.errors import classified_errors
from storage.schema import rollout_events, rollout_stats, rollouts
from storage.upserts import upsert

# States, modes, decisions and roles as stored (worker.settings.rollout_plan has the enums).
RUNNING, PROMOTED, ROLLED_BACK, ABORTED = "running", "promoted", "rolled_back", "aborted"
SHADOW, CANARY = "shadow", "canary"
START, PASS, WAIT, ADVANCE, PROMOTE, ROLLBACK, ABORT = (
    "start", "pass", "wait", "advance", "promote", "rollback", "abort"
)  # fmt: skip
PRIMARY, CANDIDATE = "primary", "candidate"


class RolloutConflict(Exception):
    """The model already has a running rollout."""


@dataclass(frozen=True, slots=True)
class RolloutRecord:
    id: int
    model: str
    candidate_version: str
    primary_version: str
    mode: str
    state: str
    steps: list[float]  # canary shares in percent
    step: int  # index into steps
    share: float  # of requests the candidate answers now, 0..1
    sample: float
    interval_s: float
    passes_needed: int
    passes: int  # consecutive passing intervals at this step
    gates: dict[str, Any]  # the thresholds
    revision: int
    interval_start: datetime  # of the current analysis interval (UTC)
    reason: str | None  # of the last decision
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class RolloutEvent:
    id: int
    rollout_id: int
    at: datetime
    step: int
    share: float
    decision: str
    gates: dict[str, Any]  # the measured values the decision was taken on
    reason: str | None


@dataclass(frozen=True, slots=True)
class RolloutStats:
    """One worker's running totals for one version in one analysis interval."""

    rollout_id: int
    interval_start: datetime
    role: str  # PRIMARY or CANDIDATE
    worker: str
    requests: int = 0
    errors: int = 0
    latency_bins: list[int] = field(default_factory=list)  # opaque to storage
    compared: int = 0
    disagreement_sum: float = 0.0
    labelled: int = 0
    wrong: int = 0
    abs_error_sum: float = 0.0


class RolloutStore:
    """Reads and writes of the rollout tables; errors a retry can cure are
    ``StoreUnavailable``."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._upsert_stats = upsert(rollout_stats, engine.dialect.name)

    def start(
        self,
        *,
        model: str,
        candidate_version: str,
        primary_version: str,
        mode: str,
        steps: Sequence[float],
        share: float,
        sample: float,
        interval_s: float,
        passes_needed: int,
        gates: dict[str, Any],
        reason: str | None = None,
    ) -> RolloutRecord:
        """A new running rollout and its ``start`` event; ``RolloutConflict`` when the
        model has a running rollout already."""
        now = datetime.now(UTC)
        values: dict[str, Any] = {
            "model": model,
            "candidate_version": candidate_version,
            "primary_version": primary_version,
            "mode": str(mode),
            "state": RUNNING,
            "steps": [float(s) for s in steps],
            "step": 0,
            "share": float(share),
            "sample": float(sample),
            "interval_s": float(interval_s),
            "passes_needed": passes_needed,
            "passes": 0,
            "gates": gates,
            "revision": 0,
            "interval_start": now,
            "reason": reason,
            "created_at": now,
            "updated_at": now,
        }
        with classified_errors():
            try:
                with begin_write(self._engine) as conn:
                    running = conn.execute(
                        select(rollouts.c.id).where(
                            rollouts.c.model == model, rollouts.c.state == RUNNING
                        )
                    ).scalar()
                    if running is not None:
                        raise RolloutConflict(
                            f"model {model!r} has a running rollout (#{running}): "
                            "promote or abort it first"
                        )
                    new_id = conn.execute(
                        insert(rollouts).values(values).returning(rollouts.c.id)
                    ).scalar_one()
                    record = RolloutRecord(id=new_id, **values)
                    conn.execute(insert(rollout_events).values(_event(record, START, {})))
            except IntegrityError as exc:  # a start that raced ours won (the unique index)
                raise RolloutConflict(f"model {model!r} has a running rollout") from exc
        return record

    def get(self, rollout_id: int) -> RolloutRecord | None:
        found = self._records(select(rollouts).where(rollouts.c.id == rollout_id))
        return found[0] if found else None

    def latest(self, model: str) -> RolloutRecord | None:
        """The model's newest rollout, in any state."""
        query = select(rollouts).where(rollouts.c.model == model)
        found = self._records(query.order_by(rollouts.c.id.desc()).limit(1))
        return found[0] if found else None

    def current(self) -> list[RolloutRecord]:
        """The newest rollout of each model, in any state (what workers route by)."""
        newest = select(func.max(rollouts.c.id)).group_by(rollouts.c.model)
        return self._records(
            select(rollouts).where(rollouts.c.id.in_(newest)).order_by(rollouts.c.model)
        )

    def newest_id(self) -> int | None:
        """The id of the newest rollout (None: none yet). A new rollout raises it; as a
        rollout that is not running never changes (``decide``), a reader that saw none
        running knows from this alone whether ``current`` has changed since."""
        with classified_errors(), self._engine.connect() as conn:
            newest: int | None = conn.execute(select(func.max(rollouts.c.id))).scalar()
        return newest

    def all(self, model: str | None = None) -> list[RolloutRecord]:
        """Every rollout (of ``model``), oldest first."""
        query = select(rollouts).order_by(rollouts.c.id)
        if model is not None:
            query = query.where(rollouts.c.model == model)
        return self._records(query)

    def events(self, rollout_id: int) -> list[RolloutEvent]:
        """The rollout's decisions, oldest first."""
        query = (
            select(rollout_events)
            .where(rollout_events.c.rollout_id == rollout_id)
            .order_by(rollout_events.c.id)
        )
        with classified_errors(), self._engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        return [RolloutEvent(**{**row, "at": as_utc(row["at"])}) for row in rows]

    def decide(
        self,
        seen: RolloutRecord,
        *,
        decision: str,
        state: str,
        step: int,
        share: float,
        passes: int,
        interval_start: datetime,
        gates: dict[str, Any],
        reason: str | None,
    ) -> RolloutRecord | None:
        """Move a running rollout from ``seen`` on and log the decision, in one
        transaction.

        None, with nothing written, when the rollout is no longer at ``seen.revision``
        (another worker, or a person, decided first) or is not running: a rollout that
        has ended never changes again.
        """
        now = datetime.now(UTC)
        changes: dict[str, Any] = {
            "state": str(state),
            "step": step,
            "share": float(share),
            "passes": passes,
            "interval_start": _utc(interval_start),
            "reason": reason,
            "revision": seen.revision + 1,
            "updated_at": now,
        }
        with classified_errors(), begin_write(self._engine) as conn:
            moved = conn.execute(
                update(rollouts)
                .where(
                    rollouts.c.id == seen.id,
                    rollouts.c.revision == seen.revision,
                    rollouts.c.state == RUNNING,
                )
                .values(changes)
            )
            if moved.rowcount != 1:
                return None
            record = replace(seen, **changes)
            conn.execute(insert(rollout_events).values(_event(record, decision, gates, at=now)))
        return record

    def record_stats(self, rows: Sequence[RolloutStats]) -> None:
        """Upsert each worker's totals (overwriting its earlier row), in one transaction."""
        if not rows:
            return
        now = datetime.now(UTC)
        # One row per key (the last wins): PostgreSQL refuses to update a row twice in
        # one statement.
        latest = {(r.rollout_id, _utc(r.interval_start), r.role, r.worker): r for r in rows}
        params = [
            {**asdict(r), "interval_start": key[1], "updated_at": now} for key, r in latest.items()
        ]
        with classified_errors(), begin_write(self._engine) as conn:
            conn.execute(self._upsert_stats, params)

    def stats(self, rollout_id: int, interval_start: datetime | None = None) -> list[RolloutStats]:
        """Every worker's rows of one interval (without ``interval_start``: of every
        interval of the rollout), by role and worker."""
        query = (
            select(*(c for c in rollout_stats.c if c.name != "updated_at"))
            .where(rollout_stats.c.rollout_id == rollout_id)
            .order_by(rollout_stats.c.role, rollout_stats.c.worker)
        )
        if interval_start is not None:
            query = query.where(rollout_stats.c.interval_start == _utc(interval_start))
        with classified_errors(), self._engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        return [
            RolloutStats(**{**row, "interval_start": as_utc(row["interval_start"])}) for row in rows
        ]

    def _records(self, query: Any) -> list[RolloutRecord]:
        with classified_errors(), self._engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        return [_record(row) for row in rows]


def _record(row: Any) -> RolloutRecord:
    return RolloutRecord(
        **{
            **row,
            "interval_start": as_utc(row["interval_start"]),
            "created_at": as_utc(row["created_at"]),
            "updated_at": as_utc(row["updated_at"]),
        }
    )


def _event(
    record: RolloutRecord, decision: str, gates: dict[str, Any], *, at: datetime | None = None
) -> dict[str, Any]:
    return {
        "rollout_id": record.id,
        "at": at or record.created_at,
        "step": record.step,
        "share": record.share,
        "decision": str(decision),
        "gates": gates,
        "reason": record.reason,
    }


def _utc(value: datetime) -> datetime:
    """UTC, as stored: SQLite keeps a timestamp's wall time and drops its zone."""
    return as_utc(value).astimezone(UTC)
