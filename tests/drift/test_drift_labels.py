"""Late labels in SQL: parsing, joining before and after the result, idempotence."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from consumers.records import SourceRef
from storage import ResultRow, ResultStore
from storage.drift_windows import read_windows
from storage.labels import (
    DUPLICATE,
    JOINED,
    REJECTED,
    WAITING,
    LabelRow,
    expire_labels,
    join_labels,
    ready_labels,
)
from worker.drift.labels import BadLabel, parse_label

AT = datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC)
SOURCE = SourceRef("inferlane.labels", 0, 7)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (b"{nope", "not JSON"),
        (b"[1]", "JSON object"),
        (b'{"expected": 1}', "request_id"),
        (b'{"request_id": "", "expected": 1}', "request_id"),
        (b'{"request_id": "r1"}', "no expected"),
        (b'{"request_id": "r\\u0000", "expected": 1}', "NUL"),
    ],
)
def test_bad_labels_say_why(value: bytes, message: str) -> None:
    with pytest.raises(BadLabel, match=message):
        parse_label(value, SOURCE)


def test_a_label_keeps_its_bytes_and_source() -> None:
    label = parse_label(b'{"request_id": "r1", "expected": 3}', SOURCE)
    assert (label.request_id, label.expected, label.value) == ("r1", 3, label.value)
    assert (label.source_topic, label.source_offset) == ("inferlane.labels", 7)


def _label(rid: str, expected: Any) -> LabelRow:
    value = f'{{"request_id": "{rid}", "expected": {expected}}}'
    return LabelRow(rid, expected, value, "inferlane.labels", 0, 0)


def _pair(model: str, outputs: Any, expected: Any) -> tuple[float, float, float]:
    if not isinstance(expected, int):
        raise ValueError("expected must be a class label")
    return float(outputs["label"]), float(expected), float(outputs["label"] != expected)


def _result(rid: str, status: str = "ok") -> ResultRow:
    return ResultRow(
        rid, "digits", "1", status, "normal", {"label": 3} if status == "ok" else None,
        None, None, 0.0, 0.0, 1.0, None, 1, "t", 0, 0, AT,
    )  # fmt: skip


@pytest.fixture
def store(db_url: str) -> Iterator[ResultStore]:
    with ResultStore(db_url) as store:
        yield store


def test_labels_join_before_and_after_their_result(store: ResultStore) -> None:
    store.write([_result("after"), _result("failed", status="error")], [], [])
    outcomes = join_labels(
        store.engine,
        [_label("after", 3), _label("before", 5), _label("failed", 1), _label("after", 9)],
        _pair,
        60,
    )
    assert sorted((o.label.request_id, o.outcome) for o in outcomes) == [
        ("after", DUPLICATE),  # the second label of a batch: the first wins
        ("after", JOINED),
        ("before", WAITING),
        ("failed", REJECTED),
    ]
    assert ready_labels(store.engine) == []
    store.write([_result("before")], [], [])
    [ready] = ready_labels(store.engine)
    assert join_labels(store.engine, [ready], _pair, 60)[0].outcome == JOINED
    assert join_labels(store.engine, [_label("before", 1)], _pair, 60)[0].outcome == DUPLICATE
    assert ready_labels(store.engine) == []
    # The two joins land in one 60 s window, or in two when a window boundary passes
    # between them.
    windows = read_windows(store.engine)
    counts = (sum(w.labelled for w in windows), sum(w.wrong for w in windows))
    assert counts == (2, 1)  # 3 == 3 right, 3 != 5 wrong


def test_a_label_that_does_not_fit_is_rejected_with_the_reason(store: ResultStore) -> None:
    store.write([_result("r1")], [], [])
    [outcome] = join_labels(store.engine, [_label("r1", '"three"')], _pair, 60)
    assert (outcome.outcome, outcome.reason) == (REJECTED, "expected must be a class label")


def test_waiting_labels_expire(store: ResultStore) -> None:
    join_labels(store.engine, [_label("ghost", 1)], _pair, 60)
    assert expire_labels(store.engine, datetime(2000, 1, 1, tzinfo=UTC)) == []
    [expired] = expire_labels(store.engine, datetime.now(UTC))
    assert expired.request_id == "ghost"
    assert expire_labels(store.engine, datetime.now(UTC)) == []
