"""The rollout tables on SQLite and PostgreSQL: one running rollout per model, decisions
taken once across racing workers, per-worker measurements overwritten in place."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, TypeVar

import pytest

from storage import ResultStore, StoreUnavailable, make_engine
from storage.rollouts import (
    ABORTED,
    CANDIDATE,
    PRIMARY,
    RUNNING,
    RolloutConflict,
    RolloutRecord,
    RolloutStats,
    RolloutStore,
)
from worker.rollout.stats import VersionStats

GATES = {"max_disagreement": 0.05, "min_requests": 50}
MEASURED = {"disagreement": {"value": 0.01, "threshold": 0.05, "passed": True}}
T = TypeVar("T")


@pytest.fixture
def rollouts(db_url: str) -> Iterator[RolloutStore]:
    with ResultStore(db_url) as store:  # migrates
        yield RolloutStore(store.engine)


def start(store: RolloutStore, model: str = "digits", **overrides: Any) -> RolloutRecord:
    params: dict[str, Any] = {
        "model": model,
        "candidate_version": "2",
        "primary_version": "1",
        "mode": "canary",
        "steps": [1, 5, 25, 50, 100],
        "share": 0.01,
        "sample": 0.1,
        "interval_s": 60,
        "passes_needed": 2,
        "gates": GATES,
    }
    return store.start(**{**params, **overrides})


def advance(store: RolloutStore, seen: RolloutRecord, **changes: Any) -> RolloutRecord | None:
    decision: dict[str, Any] = {
        "decision": "advance",
        "state": RUNNING,
        "step": seen.step + 1,
        "share": seen.steps[seen.step + 1] / 100,
        "passes": 0,
        "interval_start": seen.interval_start + timedelta(seconds=seen.interval_s),
        "gates": MEASURED,
        "reason": "2 passing intervals",
    }
    return store.decide(seen, **{**decision, **changes})


def race(n: int, call: Callable[[], T]) -> list[T | BaseException]:
    """``call`` from ``n`` threads released together; each one's result or error."""
    barrier = threading.Barrier(n)
    out: list[T | BaseException] = []

    def one() -> None:
        barrier.wait()
        try:
            out.append(call())
        except BaseException as exc:  # collected for the test's assertions
            out.append(exc)

    threads = [threading.Thread(target=one) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return out


def test_start_writes_a_running_rollout_and_its_start_event(rollouts: RolloutStore) -> None:
    record = start(rollouts, reason="new weights")

    assert (record.state, record.mode, record.step, record.passes, record.revision) == (
        RUNNING, "canary", 0, 0, 0
    )  # fmt: skip
    assert record.steps == [1.0, 5.0, 25.0, 50.0, 100.0]
    assert record.interval_start.tzinfo is not None
    assert rollouts.get(record.id) == record
    assert rollouts.latest("digits") == record
    [event] = rollouts.events(record.id)
    assert (event.decision, event.step, event.share) == ("start", 0, 0.01)
    assert event.reason == "new weights"
    assert event.at == record.created_at and event.at.utcoffset() == timedelta(0)


def test_a_second_running_rollout_of_a_model_is_refused(rollouts: RolloutStore) -> None:
    first = start(rollouts)
    with pytest.raises(RolloutConflict, match="running rollout"):
        start(rollouts, candidate_version="3")
    start(rollouts, model="diabetes")  # another model is free

    stopped = rollouts.decide(
        first, decision="abort", state=ABORTED, step=0, share=0.0, passes=0,
        interval_start=first.interval_start, gates={}, reason="by hand",
    )  # fmt: skip
    assert stopped is not None and stopped.state == ABORTED
    again = start(rollouts, candidate_version="3")
    assert [r.id for r in rollouts.all("digits")] == [first.id, again.id]


def test_racing_starts_leave_one_running_rollout(rollouts: RolloutStore) -> None:
    outcomes = race(4, lambda: start(rollouts))

    won = [o for o in outcomes if isinstance(o, RolloutRecord)]
    assert len(won) == 1
    assert all(isinstance(o, RolloutConflict) for o in outcomes if o not in won)
    assert rollouts.all("digits") == won


def test_decide_from_the_current_revision_moves_the_rollout_and_logs(
    rollouts: RolloutStore,
) -> None:
    seen = start(rollouts)
    moved = advance(rollouts, seen)

    assert moved is not None
    assert (moved.step, moved.share, moved.revision) == (1, 0.05, 1)
    assert moved.reason == "2 passing intervals"
    assert moved.interval_start == seen.interval_start + timedelta(seconds=60)
    assert rollouts.get(seen.id) == moved
    start_event, event = rollouts.events(seen.id)
    assert start_event.decision == "start"
    assert (event.decision, event.step, event.share, event.gates) == ("advance", 1, 0.05, MEASURED)


def test_decide_from_a_stale_revision_writes_nothing(rollouts: RolloutStore) -> None:
    seen = start(rollouts)
    moved = advance(rollouts, seen)
    assert moved is not None

    assert advance(rollouts, seen, state=ABORTED) is None
    assert rollouts.get(seen.id) == moved
    assert [e.decision for e in rollouts.events(seen.id)] == ["start", "advance"]


def test_a_rollout_that_has_ended_never_changes_again(rollouts: RolloutStore) -> None:
    assert rollouts.newest_id() is None
    seen = start(rollouts)
    ended = advance(rollouts, seen, decision="abort", state=ABORTED, share=0.0)
    assert ended is not None and rollouts.newest_id() == seen.id

    assert advance(rollouts, ended, state=RUNNING) is None
    assert rollouts.get(seen.id) == ended
    assert [e.decision for e in rollouts.events(seen.id)] == ["start", "abort"]
    again = start(rollouts)
    assert rollouts.newest_id() == again.id > seen.id


def test_workers_racing_one_decision_take_it_once(rollouts: RolloutStore) -> None:
    seen = start(rollouts)

    outcomes = race(4, lambda: advance(rollouts, seen))

    won = [o for o in outcomes if isinstance(o, RolloutRecord)]
    assert len(won) == 1 and outcomes.count(None) == 3
    assert rollouts.get(seen.id) == won[0]
    assert [e.decision for e in rollouts.events(seen.id)] == ["start", "advance"]


def test_current_is_the_newest_rollout_of_each_model(rollouts: RolloutStore) -> None:
    old = start(rollouts)
    rollouts.decide(
        old, decision="rollback", state="rolled_back", step=0, share=0.0, passes=0,
        interval_start=old.interval_start, gates=MEASURED, reason="disagreement 0.3 > 0.05",
    )  # fmt: skip
    other = start(rollouts, model="diabetes", mode="shadow", share=0.0)
    new = start(rollouts, candidate_version="3")

    assert [(r.model, r.id) for r in rollouts.current()] == [
        ("diabetes", other.id), ("digits", new.id)
    ]  # fmt: skip
    assert [r.id for r in rollouts.all()] == [old.id, other.id, new.id]
    assert rollouts.get(old.id).reason == "disagreement 0.3 > 0.05"  # type: ignore[union-attr]
    assert rollouts.get(10_000) is None and rollouts.latest("minilm") is None


def test_a_worker_overwrites_its_own_stats_and_keeps_the_others(
    rollouts: RolloutStore,
) -> None:
    record = start(rollouts)
    interval = record.interval_start
    later = interval + timedelta(seconds=60)
    a1 = RolloutStats(record.id, interval, CANDIDATE, "a", requests=10, latency_bins=[1, 9])
    b = RolloutStats(
        record.id, interval, CANDIDATE, "b", requests=7, errors=1, latency_bins=[7, 0],
        compared=3, disagreement_sum=0.5, labelled=2, wrong=1, abs_error_sum=1.5,
    )  # fmt: skip
    a_primary = RolloutStats(record.id, interval, PRIMARY, "a", requests=90)
    a_next = RolloutStats(record.id, later, CANDIDATE, "a", requests=1)
    rollouts.record_stats([a1, b, a_primary, a_next])

    a2 = RolloutStats(record.id, interval, CANDIDATE, "a", requests=25, latency_bins=[5, 20])
    rollouts.record_stats([a2])

    assert rollouts.stats(record.id, interval) == [a2, b, a_primary]
    assert rollouts.stats(record.id, later) == [a_next]
    # The same instant in another zone names the same interval.
    shifted = interval.astimezone(timezone(timedelta(hours=2)))
    assert rollouts.stats(record.id, shifted) == [a2, b, a_primary]
    rollouts.record_stats([])


def test_a_workers_counts_come_back_whole_from_their_row(rollouts: RolloutStore) -> None:
    record = start(rollouts)
    counts = VersionStats(
        requests=7, errors=2, compared=5, disagreement_sum=1.5, labelled=4, wrong=1,
        abs_error_sum=2.25,
    )  # fmt: skip
    counts.add_latency(3.0, count=7)
    rollouts.record_stats([counts.as_row(record.id, record.interval_start, CANDIDATE, "a")])

    [row] = rollouts.stats(record.id, record.interval_start)
    assert VersionStats.from_row(row) == counts
    # Every count a row stores is one of the worker's: none is left behind.
    key = {"rollout_id", "interval_start", "role", "worker"}
    assert {k: v for k, v in asdict(row).items() if k not in key} == asdict(counts)


def test_an_unreachable_database_is_store_unavailable() -> None:
    engine = make_engine("postgresql://postgres@127.0.0.1:1/test?connect_timeout=2")
    store = RolloutStore(engine)
    try:
        with pytest.raises(StoreUnavailable):
            store.current()
        with pytest.raises(StoreUnavailable):
            store.record_stats([RolloutStats(1, datetime.now(UTC), CANDIDATE, "a")])
    finally:
        engine.dispose()
