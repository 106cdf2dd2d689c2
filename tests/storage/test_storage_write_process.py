"""WriterProcess: ResultStore.write's contract, kept when the write runs in a child
process (SQLite and PostgreSQL): one transaction, refused values and unreachable
databases told apart, and a child that dies replaced by the next write."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import psutil
import pytest
from storage_rows import drift, offset, result

from storage import ResultStore, RowsRefused, StoreUnavailable, count_results, result_counts
from storage.write_process import WriterProcess


@pytest.fixture
def writer(store: ResultStore, db_url: str) -> Iterator[WriterProcess]:
    with WriterProcess(store, db_url, nice=5) as writer:
        writer.start()
        yield writer


def _child_pid(writer: WriterProcess) -> int:
    assert writer.pid is not None
    return writer.pid


def test_a_write_lands_whole_in_the_database(writer: WriterProcess, store: ResultStore) -> None:
    writer.write(
        [result("r1", outputs={"label": 3}), result("r2", status="error")],
        [drift("r1", 1.0, 0.5)],
        [offset("t", 0, 7)],
    )

    assert result_counts(store.engine) == {"ok": 1, "error": 1}
    assert store.committed_offsets("g") == {("t", 0): 7}


def test_the_child_runs_below_the_callers_cpu_priority(writer: WriterProcess) -> None:
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    assert os.getpriority(os.PRIO_PROCESS, _child_pid(writer)) == min(19, ours + 5)


def test_a_refused_value_raises_rows_refused_and_keeps_nothing(
    writer: WriterProcess, store: ResultStore
) -> None:
    bad = drift("r2", 1.0, 0.0)
    object.__setattr__(bad, "output", None)  # NOT NULL

    with pytest.raises(RowsRefused) as caught:
        writer.write([result("r1")], [bad], [offset("t", 0, 3)])

    assert caught.value.reason  # the database's own message
    assert count_results(store.engine) == 0
    assert store.committed_offsets("g") == {}
    writer.write([result("r1")], [], [offset("t", 0, 3)])  # the same child goes on
    assert count_results(store.engine) == 1


def test_a_dead_child_is_a_retriable_failure_and_the_next_write_starts_another(
    writer: WriterProcess, store: ResultStore
) -> None:
    first = _child_pid(writer)
    os.kill(first, signal.SIGKILL)

    with pytest.raises(StoreUnavailable) as caught:
        writer.write([result("r1")], [], [])
    assert caught.value.retriable
    writer.write([result("r1")], [], [])  # the sink's retry

    assert _child_pid(writer) != first
    assert count_results(store.engine) == 1


def test_an_unreachable_database_is_retriable() -> None:
    url = "postgresql://postgres@127.0.0.1:1/test"
    with (
        ResultStore(url, migrate=False) as store,
        WriterProcess(store, url) as writer,
        pytest.raises(StoreUnavailable),
    ):
        writer.write([result("r1")], [], [])


def test_close_ends_the_child(store: ResultStore, db_url: str) -> None:
    writer = WriterProcess(store, db_url)
    writer.start()
    process = psutil.Process(_child_pid(writer))

    writer.close()

    assert writer.pid is None
    assert not process.is_running()


@pytest.mark.parametrize(
    "url", ["sqlite://", "sqlite:///:memory:", "sqlite:///file:w?mode=memory&uri=true"]
)
def test_an_in_memory_sqlite_database_is_refused(store: ResultStore, url: str) -> None:
    """The child would write to a database of its own, which the worker never sees."""
    with pytest.raises(ValueError, match="in-memory"):
        WriterProcess(store, url)
