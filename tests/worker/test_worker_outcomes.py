"""Outcomes: completed, expired and rejected results with consistent latencies."""

from __future__ import annotations

import time

import pytest
from pipeline_factories import classifier, pending, record

from consumers.contract import ErrorInfo, Priority, Status
from consumers.errors import BadInput, UnknownModel
from worker.base.outcomes import completed, expired, rejected
from worker.base.pending import Batch, BatchRun, ItemResult

OK_OUT = {"label": 2, "probs": [0.1, 0.2, 0.7]}


def run_of(*results: ItemResult, started_s: float = 10.0, compute_s: float = 0.25) -> BatchRun:
    return BatchRun(list(results), "v3", started_s, compute_s)


def test_completed_gives_one_outcome_per_item_with_consistent_latency() -> None:
    items = [
        pending(received_s=9.0, lane=Priority.HIGH, metadata={"k": 1}, reply_to="rt"),
        pending(received_s=9.5),
    ]
    batch = Batch("m", items, formed_s=10.0)
    outcomes = completed(batch, run_of(ItemResult(OK_OUT), ItemResult([1])), classifier())

    assert len(outcomes) == 2
    first, second = (o.result for o in outcomes)
    assert first is not None and second is not None
    assert first.status is Status.OK and first.outputs == OK_OUT and first.error is None
    assert first.model_version == "v3" and first.batch_size == 2
    assert first.priority is Priority.HIGH and second.priority is Priority.NORMAL
    assert first.metadata == {"k": 1}
    assert outcomes[0].reply_to == "rt" and outcomes[1].reply_to is None
    assert first.latency_ms.queue == pytest.approx(1000.0)
    assert second.latency_ms.queue == pytest.approx(500.0)
    for r in (first, second):
        assert r.latency_ms.compute == pytest.approx(250.0)
        assert r.latency_ms.total == pytest.approx(r.latency_ms.queue + r.latency_ms.compute)
        assert r.latency_ms.total >= r.latency_ms.queue
    assert {o.batch_id for o in outcomes} == {batch.id}
    assert [o.record for o in outcomes] == [p.record for p in items]
    assert all(o.dead_letter is None for o in outcomes)


def test_an_item_error_becomes_an_error_result_and_a_dead_letter() -> None:
    items = [pending(received_s=9.0), pending(received_s=9.0)]
    error = ErrorInfo(code="model_error", message="model raised on this input: boom")
    outcomes = completed(
        Batch("m", items, 10.0), run_of(ItemResult(OK_OUT), ItemResult(error=error)), classifier()
    )

    good, bad = outcomes
    assert good.dead_letter is None and good.result is not None
    assert good.result.status is Status.OK
    assert bad.result is not None and bad.result.status is Status.ERROR
    assert bad.result.error == error and bad.result.outputs is None
    assert bad.dead_letter is not None
    assert bad.dead_letter.code == "model_error"
    assert bad.dead_letter.message == error.message
    assert bad.dead_letter.value is items[1].record.value
    assert bad.drift is None


def test_completed_refuses_a_run_with_the_wrong_number_of_results() -> None:
    batch = Batch("m", [pending(), pending()], 0.0)
    with pytest.raises(ValueError):
        completed(batch, run_of(ItemResult(OK_OUT)), classifier())


def test_drift_only_when_expected_is_given() -> None:
    items = [pending(expected=1), pending(), pending(expected=2)]
    outcomes = completed(
        Batch("m", items, 0.0), run_of(*[ItemResult(OK_OUT)] * 3, started_s=1.0), classifier()
    )
    assert [o.drift for o in outcomes] == [(2.0, 1.0, 1.0), None, (2.0, 2.0, 0.0)]


@pytest.mark.parametrize("expected", ["cat", 99, -1, True, [1], 1.5])
def test_a_malformed_expected_leaves_a_good_result_without_drift(expected: object) -> None:
    item = pending(expected=expected)
    (outcome,) = completed(Batch("m", [item], 0.0), run_of(ItemResult(OK_OUT)), classifier())
    assert outcome.drift is None
    assert outcome.result is not None and outcome.result.status is Status.OK
    assert outcome.dead_letter is None


def test_expired_reports_the_wait_as_queue_and_total() -> None:
    item = pending(received_s=5.0, lane=Priority.LOW, metadata={"a": "b"}, reply_to="rt")
    outcome = expired(item, 5.75)
    result = outcome.result
    assert result is not None
    assert result.status is Status.EXPIRED
    assert result.error is not None and result.error.code == "expired"
    assert "750.0 ms" in result.error.message
    assert result.latency_ms.queue == result.latency_ms.total == pytest.approx(750.0)
    assert result.latency_ms.compute == 0.0
    assert result.priority is Priority.LOW
    assert result.metadata == {"a": "b"} and outcome.reply_to == "rt"
    assert outcome.dead_letter is None and outcome.record is item.record


def test_rejected_with_a_known_id_has_a_result_and_a_dead_letter() -> None:
    rec = record(b"raw bytes", received_s=time.monotonic() - 0.5)
    req = pending(priority="high", metadata={"x": 1}, reply_to="rt").request
    outcome = rejected(rec, UnknownModel("no model 'm'"), req.request_id, req, Priority.LOW)

    assert outcome.dead_letter is not None
    assert outcome.dead_letter.code == "unknown_model"
    assert outcome.dead_letter.value == b"raw bytes"
    result = outcome.result
    assert result is not None
    assert result.status is Status.REJECTED
    assert result.request_id == req.request_id and result.model == "m"
    assert result.error == ErrorInfo(code="unknown_model", message="no model 'm'")
    assert result.priority is Priority.HIGH  # the request's own priority wins
    assert result.metadata == {"x": 1} and outcome.reply_to == "rt"
    assert result.latency_ms.queue == 0.0 and result.latency_ms.compute == 0.0
    assert result.latency_ms.total >= 500.0


def test_rejected_with_only_a_key_id_has_an_empty_model_and_the_lane_priority() -> None:
    outcome = rejected(record(b"{"), BadInput("x"), "from-key", None, Priority.LOW)
    assert outcome.result is not None
    assert outcome.result.model == "" and outcome.result.priority is Priority.LOW
    assert outcome.reply_to is None and outcome.dead_letter is not None


def test_rejected_without_an_id_is_a_dead_letter_only() -> None:
    outcome = rejected(record(b"{"), BadInput("x"), None, None, Priority.NORMAL)
    assert outcome.result is None
    assert outcome.dead_letter is not None and outcome.dead_letter.code == "bad_input"


def test_an_item_expired_in_the_executor_queue_ends_expired_without_a_dead_letter() -> None:
    items = [pending(received_s=9.0, deadline_s=9.5), pending(received_s=9.0)]
    run = run_of(ItemResult(expired=True), ItemResult(OK_OUT))
    late, served = completed(Batch("m", items, 10.0), run, classifier())

    assert late.result is not None and late.result.status is Status.EXPIRED
    assert late.result.error is not None and late.result.error.code == "expired"
    assert late.result.latency_ms.queue == pytest.approx(1000.0)  # waited until the start
    assert late.dead_letter is None and late.drift is None
    assert served.result is not None and served.result.status is Status.OK
