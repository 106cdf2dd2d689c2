"""Late labels: joined into the drift log when their result is stored, else kept waiting.

Idempotent: a request's drift-log row is written once (the first label, or the
``expected`` its request carried, wins); a label seen again is a ``duplicate``.
A joined label also adds to the labelled counts of its result's drift window.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, bindparam, delete, select

from storage.drift_records import WindowDelta, WindowKey, as_utc, window_start
from storage.drift_windows import add_windows_in, dialect_insert
from storage.engine import begin_write
from storage.errors import classified_errors
from storage.schema import drift_labels, inference_log, inference_results

# (model, outputs, expected) -> (output, expected, error) for the drift log; raises
# ValueError (or the caller's error type) when the label does not fit the model.
Pairing = Callable[[str, Any, Any], tuple[float, float, float] | None]

JOINED, DUPLICATE, WAITING, REJECTED = "joined", "duplicate", "waiting", "rejected"


@dataclass(frozen=True, slots=True)
class LabelRow:
    request_id: str
    expected: Any  # JSON
    value: str  # the record's text, for a dead letter
    source_topic: str
    source_partition: int
    source_offset: int


@dataclass(frozen=True, slots=True)
class LabelOutcome:
    label: LabelRow
    outcome: str  # JOINED, DUPLICATE, WAITING or REJECTED
    reason: str = ""


def join_labels(
    engine: Engine, labels: Sequence[LabelRow], pair: Pairing, window_s: int
) -> list[LabelOutcome]:
    """One transaction: join what has a result, keep the rest waiting."""
    if not labels:
        return []
    first: dict[str, LabelRow] = {}
    for label in labels:
        first.setdefault(label.request_id, label)
    repeated = [
        LabelOutcome(label, DUPLICATE) for label in labels if first[label.request_id] is not label
    ]
    with classified_errors(), begin_write(engine) as conn:
        outcomes = _join(conn, list(first.values()), pair, window_s)
        done = [o.label.request_id for o in outcomes if o.outcome != WAITING]
        if done:
            conn.execute(
                delete(drift_labels).where(drift_labels.c.request_id.in_(bindparam("ids", done)))
            )
        waiting = [_pending(o.label) for o in outcomes if o.outcome == WAITING]
        if waiting:
            stmt = dialect_insert(drift_labels, conn.dialect.name).on_conflict_do_nothing()
            conn.execute(stmt, waiting)
    return outcomes + repeated


def _join(
    conn: Connection, labels: list[LabelRow], pair: Pairing, window_s: int
) -> list[LabelOutcome]:
    ids = [label.request_id for label in labels]
    r = inference_results
    results = {
        rid: rest
        for rid, *rest in conn.execute(
            select(r.c.request_id, r.c.model, r.c.model_version, r.c.status, r.c.outputs,
                   r.c.created_at).where(r.c.request_id.in_(ids))
        )
    }  # fmt: skip
    logged = set(
        conn.execute(select(inference_log.c.request_id).where(inference_log.c.request_id.in_(ids)))
        .scalars()
        .all()
    )
    outcomes: list[LabelOutcome] = []
    rows: list[dict[str, Any]] = []
    deltas: dict[WindowKey, WindowDelta] = {}
    for label in labels:
        if label.request_id in logged:
            outcomes.append(LabelOutcome(label, DUPLICATE))
            continue
        found = results.get(label.request_id)
        if found is None:
            outcomes.append(LabelOutcome(label, WAITING))
            continue
        model, version, status, outputs, created_at = found
        if status != "ok":
            outcomes.append(LabelOutcome(label, REJECTED, f"the request's result is {status}"))
            continue
        try:
            pair_ = pair(model, outputs, label.expected)
        except Exception as exc:  # the label does not fit the model: its dead letter says why
            outcomes.append(LabelOutcome(label, REJECTED, str(exc) or type(exc).__name__))
            continue
        if pair_ is None:
            outcomes.append(LabelOutcome(label, REJECTED, f"model {model} keeps no drift log"))
            continue
        output, expected, error = pair_
        at = as_utc(created_at)
        rows.append(
            {
                "request_id": label.request_id,
                "model": model,
                "model_version": version,
                "output": output,
                "expected": expected,
                "error": error,
                "created_at": at,
            }
        )
        key = WindowKey(model, version or "", window_start(at, window_s))
        deltas.setdefault(key, WindowDelta()).add_label(abs(error))
        outcomes.append(LabelOutcome(label, JOINED))
    if rows:
        insert = dialect_insert(inference_log, conn.dialect.name)
        conn.execute(insert.on_conflict_do_nothing(), rows)
        add_windows_in(conn, deltas, window_s)
    return outcomes


def _pending(label: LabelRow) -> dict[str, Any]:
    return {
        "request_id": label.request_id,
        "expected": label.expected,
        "value": label.value,
        "source_topic": label.source_topic,
        "source_partition": label.source_partition,
        "source_offset": label.source_offset,
        "received_at": datetime.now(UTC),
    }


_COLUMNS = (
    drift_labels.c.request_id,
    drift_labels.c.expected,
    drift_labels.c.value,
    drift_labels.c.source_topic,
    drift_labels.c.source_partition,
    drift_labels.c.source_offset,
)


def ready_labels(engine: Engine, limit: int = 1000) -> list[LabelRow]:
    """Waiting labels whose result has been stored since."""
    r = inference_results
    query = (
        select(*_COLUMNS)
        .join(r, r.c.request_id == drift_labels.c.request_id)
        .order_by(drift_labels.c.received_at)
        .limit(limit)
    )
    with classified_errors(), engine.connect() as conn:
        return [LabelRow(*row) for row in conn.execute(query)]


def expire_labels(engine: Engine, received_before: datetime) -> list[LabelRow]:
    """Remove and return the labels that waited since before ``received_before``."""
    stmt = (
        delete(drift_labels)
        .where(drift_labels.c.received_at < received_before)
        .returning(*_COLUMNS)
    )
    with classified_errors(), begin_write(engine) as conn:
        return [LabelRow(*row) for row in conn.execute(stmt)]
