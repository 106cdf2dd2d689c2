"""Windows judged against the reference: a mid-stream shift is flagged in its first
window and not before; an i.i.d. replay raises nothing. SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from storage import ResultStore
from storage.drift_records import INPUT, OUTPUT
from storage.drift_windows import load_references, read_flags, read_windows
from tests.drift.drift_factories import START, WINDOW_S, stream, tracker


@pytest.fixture
def store(db_url: str) -> Iterator[ResultStore]:
    with ResultStore(db_url) as store:
        yield store


def test_a_shift_is_flagged_from_its_first_window_on(store: ResultStore) -> None:
    registry = CollectorRegistry()
    t = tracker(store.engine, registry)
    for at, obs in stream(seed=1, windows=6, per_window=400, shift_at=3):
        t.record(obs, at)
    t.flush(final=True)

    flagged = {key.window_start for key, *_ in read_flags(store.engine)}
    starts = [w.start for w in read_windows(store.engine, model="digits")]
    assert len(starts) == 6
    assert flagged == set(starts[3:])
    counted = registry.get_sample_value(
        "inferlane_drift_flags_total", {"model": "digits", "metric": "output_psi"}
    )
    assert counted == 3


def test_an_iid_replay_raises_no_flag(store: ResultStore) -> None:
    t = tracker(store.engine)
    for at, obs in stream(seed=2, windows=8, per_window=300, shift_at=None):
        t.record(obs, at)
    t.flush(final=True)

    assert read_flags(store.engine) == []
    assert len(read_windows(store.engine)) == 8


def test_windows_hold_counts_and_the_reference_is_the_first_rows(store: ResultStore) -> None:
    t = tracker(store.engine)
    for at, obs in stream(seed=3, windows=3, per_window=400, shift_at=None):
        t.record(obs, at)
    t.flush(final=True)

    refs = load_references(store.engine)
    assert set(refs) == {("digits", "1", OUTPUT), ("digits", "1", INPUT)}
    assert refs[("digits", "1", OUTPUT)].rows == 500
    assert len(refs[("digits", "1", INPUT)].counts) == 10
    windows = read_windows(store.engine, since=START)
    assert [w.rows for w in windows] == [400, 400, 400]
    # Every row is binned, the reference ones too, once the reference exists.
    assert [sum(w.bins[OUTPUT].values()) for w in windows] == [400, 400, 400]
    assert windows[1].start - windows[0].start == (windows[0].end - windows[0].start)
    assert windows[0].span_s == WINDOW_S


def test_flags_are_stored_once_when_judged_again(store: ResultStore) -> None:
    t = tracker(store.engine)
    for at, obs in stream(seed=4, windows=2, per_window=600, shift_at=1):
        t.record(obs, at)
    t.flush(final=True)
    first = read_flags(store.engine)
    for at, obs in stream(seed=5, windows=2, per_window=100, shift_at=1):
        t.record(obs, at)  # the same windows again: counts add, flags do not repeat
    t.flush(final=True)

    assert first
    assert len(read_flags(store.engine)) == len({(k, m) for k, m, *_ in read_flags(store.engine)})
    assert {m for _, m, *_ in read_flags(store.engine)} >= {m for _, m, *_ in first}
