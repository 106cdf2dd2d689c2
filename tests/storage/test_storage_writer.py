"""ResultStore.write: upserts, monotonic offsets, one transaction, retriable errors."""

from __future__ import annotations

import sqlite3
from dataclasses import fields
from datetime import UTC, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError
from storage_rows import NOW, drift, offset, result

from storage import (
    ResultRow,
    ResultStore,
    RowColumns,
    RowsRefused,
    Same,
    StoreUnavailable,
    count_results,
    result_counts,
)
from storage.bulk import COPY_MIN_ROWS
from storage.schema import inference_log, inference_results

DRIFT = [c.name for c in inference_log.columns]


def test_replay_keeps_one_row_with_the_latest_values(store: ResultStore) -> None:
    store.write([result("r1", status="error", error_code="bad_input")], [], [])
    store.write([result("r1", status="ok", outputs=[1, 2], source_offset=7)], [], [])

    with store.engine.connect() as conn:
        rows = conn.execute(select(inference_results)).mappings().all()
    assert len(rows) == 1
    assert rows[0]["status"] == "ok"
    assert rows[0]["error_code"] is None
    assert rows[0]["outputs"] == [1, 2]
    assert rows[0]["source_offset"] == 7


def test_a_key_repeated_in_one_batch_keeps_the_last_row(store: ResultStore) -> None:
    store.write(
        [result("r1", status="error"), result("r1", status="expired")],
        [drift("r1", 1.0, 0.0), drift("r1", 2.0, 0.0)],
        [],
    )

    assert result_counts(store.engine) == {"expired": 1}
    with store.engine.connect() as conn:
        assert conn.execute(select(inference_log.c.output)).scalars().all() == [2.0]


def test_values_round_trip(store: ResultStore) -> None:
    outputs = {"label": 3, "scores": [0.25, 0.75], "text": "héllo"}
    store.write([result("r1", outputs=outputs), result("r2", outputs=None)], [], [])

    results = inference_results.c
    with store.engine.connect() as conn:
        rows = dict(conn.execute(select(results.request_id, results.outputs)).all())
        null_outputs = conn.scalars(select(results.request_id).where(results.outputs.is_(None)))
        null_ids = null_outputs.all()
        created_at = conn.scalars(select(results.created_at)).first()
    assert rows == {"r1": outputs, "r2": None}
    assert null_ids == ["r2"]  # SQL NULL, not the JSON text 'null'
    assert created_at is not None
    # SQLite keeps no zone; the stored wall time is still UTC.
    assert created_at.replace(tzinfo=created_at.tzinfo or UTC) == NOW


def test_offsets_never_move_backwards(store: ResultStore) -> None:
    store.write([], [], [offset("t", 0, 10), offset("t", 1, 3)])
    store.write([], [], [offset("t", 0, 5), offset("t", 1, 4)])

    assert store.committed_offsets("g") == {("t", 0): 10, ("t", 1): 4}

    store.write([], [], [offset("t", 0, 12), offset("t", 0, 11)])
    assert store.committed_offsets("g") == {("t", 0): 12, ("t", 1): 4}


def test_offsets_are_kept_per_group(store: ResultStore) -> None:
    store.write([], [], [offset("t", 0, 10, group_id="a"), offset("t", 0, 2, group_id="b")])

    assert store.committed_offsets("a") == {("t", 0): 10}
    assert store.committed_offsets("b") == {("t", 0): 2}
    assert store.committed_offsets("c") == {}


def test_a_failed_write_keeps_nothing_of_its_batch(store: ResultStore) -> None:
    store.write([result("old")], [], [offset("t", 0, 1)])
    bad_drift = drift("r2", 1.0, 0.0)
    object.__setattr__(bad_drift, "output", None)  # violates NOT NULL after results ran

    with pytest.raises(RowsRefused):
        store.write([result("r1"), result("old", status="error")], [bad_drift], [offset("t", 0, 9)])

    assert result_counts(store.engine) == {"ok": 1}
    assert count_results(store.engine) == 1
    assert store.committed_offsets("g") == {("t", 0): 1}


def test_an_empty_write_does_nothing(store: ResultStore) -> None:
    store.write([], [], [])
    assert count_results(store.engine) == 0


def test_unreachable_postgres_is_retriable() -> None:
    store = ResultStore("postgresql://postgres@127.0.0.1:1/test", migrate=False)
    with pytest.raises(StoreUnavailable) as caught:
        store.write([result("r1")], [], [])
    assert caught.value.retriable
    assert isinstance(caught.value.__cause__, OperationalError)
    store.close()


def test_a_locked_sqlite_is_retriable_and_the_retry_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("storage.engine.SQLITE_BUSY_TIMEOUT_MS", 50)
    path = tmp_path / "store.db"
    with ResultStore(f"sqlite:///{path}") as store:
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        batch = ([result("r1")], [drift("r1", 1.0, 1.0)], [offset("t", 0, 1)])

        with pytest.raises(StoreUnavailable):
            store.write(*batch)
        other.execute("ROLLBACK")
        other.close()
        store.write(*batch)

        assert count_results(store.engine) == 1
        assert store.committed_offsets("g") == {("t", 0): 1}


def test_a_missing_table_is_not_retriable(tmp_path: Path) -> None:
    bare = ResultStore(f"sqlite:///{tmp_path / 'bare.db'}", migrate=False)
    with bare, pytest.raises(OperationalError, match="no such table"):
        bare.write([result("r1")], [], [])


def test_a_value_the_database_refuses_is_refused_for_good_without_its_parameters(
    store: ResultStore,
) -> None:
    # SQLite stores NaN as NULL (a NOT NULL column refuses it); PostgreSQL refuses NUL in
    # text. Each database refuses one of the two, for good: a retry cannot help.
    bad = result("r1", model="m\x00", error_message="PARAM-MARKER")
    with pytest.raises(RowsRefused) as caught:
        store.write([bad], [drift("r1", float("nan"), 1.0)], [offset("t", 0, 1)])
    assert not caught.value.retriable
    assert "PARAM-MARKER" not in caught.value.reason and "INSERT" not in caught.value.reason

    store.write([result("r2")], [], [offset("t", 0, 2)])  # nothing of the refused batch
    assert result_counts(store.engine) == {"ok": 1}
    assert store.committed_offsets("g") == {("t", 0): 2}


def test_a_write_of_many_rows_stores_and_upserts_as_a_small_one(store: ResultStore) -> None:
    """From COPY_MIN_ROWS rows on, PostgreSQL takes the rows by COPY: values round-trip
    (JSON, SQL NULL, times), a replay overwrites, and a refused value refuses the write."""
    n = COPY_MIN_ROWS + 10
    outputs = {"label": 3, "scores": [0.25, 0.75], "text": "héllo\ttab\nline\\"}
    first = [result(f"r{i}", outputs=outputs, source_offset=i) for i in range(n)]
    first[1] = result("r1", outputs=None)
    store.write(first, [drift(f"r{i}", float(i), 1.0) for i in range(n)], [offset("t", 0, n)])
    store.write([result(f"r{i}", status="error", outputs=[i]) for i in range(0, n, 2)], [], [])

    results = inference_results.c
    with store.engine.connect() as conn:
        rows = {r.request_id: r for r in conn.execute(select(inference_results))}
        errors = conn.scalar(select(func.sum(inference_log.c.error)))
        null_ids = conn.scalars(select(results.request_id).where(results.outputs.is_(None)))
        nulls = null_ids.all()
    assert len(rows) == n and count_results(store.engine) == n
    assert rows["r0"].status == "error" and rows["r0"].outputs == [0]
    assert rows["r3"].status == "ok" and rows["r3"].outputs == outputs
    assert rows["r3"].source_offset == 3
    assert nulls == ["r1"]  # SQL NULL, not the JSON text 'null'
    created = rows["r3"].created_at
    assert created.replace(tzinfo=created.tzinfo or UTC) == NOW
    assert errors == sum(float(i) - 1.0 for i in range(n))
    assert store.committed_offsets("g") == {("t", 0): n}

    bad = [result(f"x{i}") for i in range(n)]
    bad[-1] = result("x-last", model="m\x00")  # PostgreSQL refuses NUL in text
    bad_drift = [drift(f"x{i}", float("nan") if i == 0 else 1.0, 1.0) for i in range(n)]
    with pytest.raises(RowsRefused) as caught:  # SQLite refuses the NaN (NOT NULL)
        store.write(bad, bad_drift, [offset("t", 0, n + 1)])
    assert not caught.value.retriable
    assert count_results(store.engine) == n
    assert store.committed_offsets("g") == {("t", 0): n}


def test_a_write_of_many_rows_round_trips_every_value_as_a_small_one(store: ResultStore) -> None:
    """COPY text (PostgreSQL, from COPY_MIN_ROWS rows) escapes what its format uses, writes
    floats that read back exactly and times in any zone as the instant they name."""
    n = COPY_MIN_ROWS
    message = "tab\there\nline\rback\\slash \\N end"
    east = NOW.astimezone(timezone(timedelta(hours=2))) + timedelta(microseconds=7)
    values = [0.1 + 0.2, 1e300, -2.5e-300, 123456789.125, 0.0]
    rows = [
        result(f"r{i}", error_message=message, batch_id=None, compute_ms=values[i % 5])
        for i in range(n)
    ]
    rows[0] = result("r0", created_at=east, source_offset=2**62, batch_size=-(2**31))
    store.write(rows, [drift(f"r{i}", values[i % 5], -values[i % 5]) for i in range(n)], [])

    drift_log = inference_log.c
    with store.engine.connect() as conn:
        stored = {r.request_id: r for r in conn.execute(select(inference_results))}
        errors = dict(conn.execute(select(drift_log.request_id, drift_log.error)).all())
    assert len(stored) == n
    assert stored["r1"].error_message == message and stored["r1"].batch_id is None
    assert [stored[f"r{i}"].compute_ms for i in range(1, 5)] == values[1:]
    assert [errors[f"r{i}"] for i in range(5)] == [2 * v for v in values]
    if store.engine.dialect.name == "postgresql":  # SQLite keeps the wall time, no zone
        assert stored["r0"].created_at == east
    assert stored["r0"].source_offset == 2**62 and stored["r0"].batch_size == -(2**31)

    rows[1] = result("r1", source_offset=2**63)  # beyond BIGINT
    with pytest.raises(RowsRefused):
        store.write(rows, [], [])


@pytest.mark.parametrize("overlap", ["first rows", "last rows"])
def test_a_write_of_many_rows_over_some_stored_keys_upserts_each_row_once(
    store: ResultStore, overlap: str
) -> None:
    """A large write whose keys are partly stored (a retried window, a Ray batch run again
    after a partial one) overwrites those rows and adds the others: one row per id."""
    n = COPY_MIN_ROWS * 2
    stored = range(n) if overlap == "first rows" else range(n, 2 * n)
    store.write([result(f"r{i}") for i in stored], [drift(f"r{i}", 0.0, 0.0) for i in stored], [])

    ids = range(n // 2, n // 2 + n)  # half of them stored already
    again = [result(f"r{i}", status="error", source_offset=i) for i in ids]
    store.write(again, [drift(f"r{i}", 1.0, 0.0) for i in ids], [offset("t", 0, 5)])
    new = [result(f"n{i}") for i in range(n)]  # and a write of new keys after it
    store.write(new, [drift(f"n{i}", 2.0, 0.0) for i in range(n)], [])

    everything = set(stored) | set(ids)
    results, drift_log = inference_results.c, inference_log.c
    with store.engine.connect() as conn:
        status = dict(conn.execute(select(results.request_id, results.status)).all())
        errors = dict(conn.execute(select(drift_log.request_id, drift_log.error)).all())
    assert len(status) == count_results(store.engine) == len(everything) + n
    assert {status[f"r{i}"] for i in ids} == {"error"}
    assert {status[f"r{i}"] for i in set(stored) - set(ids)} == {"ok"}
    assert len(errors) == len(everything) + n
    assert {errors[f"r{i}"] for i in ids} == {1.0}
    assert {errors[f"r{i}"] for i in set(stored) - set(ids)} == {0.0}
    assert store.committed_offsets("g") == {("t", 0): 5}


def test_a_write_of_many_rows_with_no_outputs_at_all(store: ResultStore) -> None:
    """A window of rejected rows only: every ``outputs`` is SQL NULL (COPY on PostgreSQL
    once took that column for Arrow's null type and failed the write)."""
    n = COPY_MIN_ROWS + 1
    store.write([result(f"r{i}", status="rejected", outputs=None) for i in range(n)], [], [])

    results = inference_results.c
    with store.engine.connect() as conn:
        nulls = conn.scalar(select(func.count()).where(results.outputs.is_(None)))
    assert nulls == n and result_counts(store.engine) == {"rejected": n}


@pytest.mark.parametrize("n", [3, COPY_MIN_ROWS + 10], ids=["few", "many"])
def test_rows_as_columns_store_what_the_same_rows_store(store: ResultStore, n: int) -> None:
    """``write_columns`` (a job's window) stores each row as ``write`` does: columns of one
    value or of many, NULLs, a key given twice (the last row wins)."""
    names = [f.name for f in fields(ResultRow)]
    rows = [
        result(
            f"r{i}",
            outputs=None if i == 1 else {"label": i, "text": "tab\there"},
            source_offset=i,
            error_message="x" if i % 2 else None,
            compute_ms=i / 3,
        )
        for i in range(n)
    ]
    rows.append(result("r2", status="error", outputs=[2]))  # r2 again: this one is kept
    store.write(rows, [drift(f"r{i}", i / 7, 0.5) for i in range(n)], [])
    same = {"model", "model_version", "priority", "batch_id", "created_at", "total_ms"}
    columns = RowColumns(
        len(rows),
        {
            name: Same(getattr(rows[0], name))
            if name in same
            else [f"c{r.request_id}" if name == "request_id" else getattr(r, name) for r in rows]
            for name in names
        },
    )
    drift_rows = RowColumns.of_rows([drift(f"cr{i}", i / 7, 0.5) for i in range(n)], DRIFT)
    store.write_columns(columns, drift_rows)

    with store.engine.connect() as conn:
        stored = {r.request_id: tuple(r)[1:] for r in conn.execute(select(inference_results))}
        log = dict(conn.execute(select(inference_log.c.request_id, inference_log.c.error)).all())
    assert len(stored) == 2 * n
    assert all(stored[f"cr{i}"] == stored[f"r{i}"] for i in range(n))
    assert stored["cr2"][names.index("status") - 1] == "error"
    assert all(log[f"cr{i}"] == log[f"r{i}"] for i in range(n))
