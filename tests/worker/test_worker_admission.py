"""Admission.admit: every record yields exactly one pending request or one ended outcome."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pipeline_factories import HIGH_TOPIC, LANE_OF_TOPIC, LOW_TOPIC, NORMAL_TOPIC, classifier
from pipeline_factories import record as make_record

from consumers.contract import Priority, Status
from consumers.errors import UnknownModel
from consumers.records import RawRecord
from worker.intake.admission import Admission, Admitted
from worker.models import Adapter
from worker.rollout.routing import Route, Router
from worker.settings import TopicConfig

ADAPTER = classifier()


def adapter_for(name: str) -> Adapter:
    if name == "clf":
        return ADAPTER
    raise UnknownModel(f"no model named {name!r}")


def admission(max_bytes: int = 10_000) -> Admission:
    return Admission(
        adapter_for=adapter_for,
        lane_of_topic=LANE_OF_TOPIC,
        max_bytes=max_bytes,
        reply_to_allowed=TopicConfig().reply_to_allowed,
    )


def good(rid: str = "r1", **fields: Any) -> dict[str, Any]:
    return {"request_id": rid, "model": "clf", "inputs": [1, 2, 3, 4], **fields}


def admit_one(value: bytes | dict[str, Any] | None, **record_args: Any) -> Admitted:
    out = admission().admit([make_record(value, **record_args)])
    assert len(out.pending) + len(out.ended) == 1
    return out


@pytest.mark.parametrize(
    ("topic", "lane"),
    [
        (HIGH_TOPIC, Priority.HIGH),
        (NORMAL_TOPIC, Priority.NORMAL),
        (LOW_TOPIC, Priority.LOW),
        ("some.other.topic", Priority.NORMAL),
    ],
)
def test_the_lane_follows_the_topic(topic: str, lane: Priority) -> None:
    (item,) = admit_one(good(), topic=topic).pending
    assert item.lane is lane


@pytest.mark.parametrize("priority", list(Priority))
def test_the_priority_field_overrides_the_topic(priority: Priority) -> None:
    (item,) = admit_one(good(priority=priority.value), topic=LOW_TOPIC).pending
    assert item.lane is priority


def test_a_pending_item_is_prepared_by_the_adapter() -> None:
    rec = make_record(good(inputs=[[1, 2], [3, 4]]), received_s=42.0)
    (item,) = admission().admit([rec]).pending
    assert item.record is rec and item.received_s == 42.0
    assert item.model == "clf" and item.request.request_id == "r1"
    np.testing.assert_array_equal(item.item, np.array([1, 2, 3, 4], dtype=np.float32))
    assert item.cost == 1
    assert item.deadline_s is None


def test_timeout_ms_is_relative_to_receipt() -> None:
    (item,) = admit_one(good(timeout_ms=250), received_s=10.0).pending
    assert item.deadline_s == pytest.approx(10.25)


def test_deadline_ms_is_absolute_wall_time_turned_monotonic() -> None:
    now_ms = time.time() * 1000
    (item,) = admit_one(good(deadline_ms=int(now_ms + 5000))).pending
    assert item.deadline_s == pytest.approx(time.monotonic() + 5.0, abs=0.5)


@pytest.mark.parametrize(("timeout_ms", "ahead_s"), [(1000, 1.0), (60_000, 20.0)])
def test_the_earlier_of_timeout_and_deadline_wins(timeout_ms: int, ahead_s: float) -> None:
    received = time.monotonic()
    deadline_ms = int(time.time() * 1000 + 20_000)
    (item,) = admit_one(
        good(timeout_ms=timeout_ms, deadline_ms=deadline_ms), received_s=received
    ).pending
    assert item.deadline_s == pytest.approx(received + ahead_s, abs=0.5)


def test_an_unknown_model_is_rejected_with_a_result_and_a_dead_letter() -> None:
    rec = make_record(good(model="nope", priority="high", metadata={"m": 1}), topic=LOW_TOPIC)
    (outcome,) = admission().admit([rec]).ended
    assert outcome.record is rec
    assert outcome.dead_letter is not None and outcome.dead_letter.code == "unknown_model"
    assert outcome.dead_letter.value is rec.value
    result = outcome.result
    assert result is not None and result.status is Status.REJECTED
    assert result.error is not None and result.error.code == "unknown_model"
    assert result.model == "nope" and result.request_id == "r1"
    assert result.priority is Priority.HIGH and result.metadata == {"m": 1}


def test_bad_inputs_are_rejected_with_bad_input() -> None:
    (outcome,) = admit_one(good(inputs="seven", reply_to="inferlane.results.team")).ended
    assert outcome.dead_letter is not None and outcome.dead_letter.code == "bad_input"
    assert outcome.result is not None and outcome.result.error is not None
    assert outcome.result.error.code == "bad_input"
    assert outcome.reply_to == "inferlane.results.team"


@pytest.mark.parametrize("topic", ["replies", "inferlane.results.", "inferlane.resultsX"])
def test_a_reply_to_outside_the_allow_list_is_rejected_and_answered_on_the_results_topic(
    topic: str,
) -> None:
    (outcome,) = admit_one(good(reply_to=topic)).ended
    assert outcome.dead_letter is not None and outcome.dead_letter.code == "reply_to_not_allowed"
    assert outcome.result is not None and outcome.result.error is not None
    assert topic in outcome.result.error.message
    assert outcome.reply_to is None  # never produce to a topic that is not allowed


def test_the_results_topic_itself_is_an_allowed_reply_to() -> None:
    (item,) = admit_one(good(reply_to="inferlane.results")).pending
    assert item.request.reply_to == "inferlane.results"


def test_an_undecodable_record_with_a_key_gets_a_rejected_result_in_the_topic_lane() -> None:
    (outcome,) = admit_one(b"{broken", key=b"k-7", topic=HIGH_TOPIC).ended
    assert outcome.dead_letter is not None and outcome.dead_letter.code == "bad_record"
    assert outcome.result is not None
    assert outcome.result.request_id == "k-7" and outcome.result.priority is Priority.HIGH


@pytest.mark.parametrize("value", [b"{broken", None, b"[1]"])
def test_an_undecodable_record_without_an_id_is_a_dead_letter_only(value: bytes | None) -> None:
    (outcome,) = admit_one(value, key=None).ended
    assert outcome.result is None
    assert outcome.dead_letter is not None and outcome.dead_letter.code == "bad_record"


def test_an_oversized_record_is_payload_too_large() -> None:
    out = admission(max_bytes=20).admit([make_record(good(), key=b"big")])
    (outcome,) = out.ended
    assert outcome.dead_letter is not None and outcome.dead_letter.code == "payload_too_large"
    assert outcome.result is not None and outcome.result.request_id == "big"


def test_a_mixed_chunk_ends_or_queues_every_record_exactly_once() -> None:
    records = [
        make_record(good("a")),
        make_record(b"\xff\xfe", key=b"b"),
        make_record(good("c", model="missing")),
        make_record(good("d", inputs=[1, 2, 3])),
        make_record(None),
        make_record(good("f", priority="low")),
        make_record(good("g", inputs=None)),
    ]
    out = admission().admit(records)

    seen = [p.record for p in out.pending] + [o.record for o in out.ended]
    assert sorted(map(id, seen)) == sorted(map(id, records))
    assert [p.request.request_id for p in out.pending] == ["a", "f"]
    assert all(o.dead_letter is not None for o in out.ended)
    with_result = sorted(o.result.request_id for o in out.ended if o.result is not None)
    assert with_result == ["b", "c", "d", "g"]


SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text("ab\u00e9", max_size=4)
)
JSON = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text("xy", max_size=2), inner, max_size=3)
    ),
    max_leaves=20,
)


@settings(max_examples=50, deadline=None, database=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["clf", "other"]),
            JSON,
            st.dictionaries(
                st.sampled_from(["priority", "timeout_ms", "expected", "metadata", "extra"]), JSON
            ),
        ),
        max_size=6,
    )
)
def test_admit_never_raises_and_accounts_for_every_record(
    specs: list[tuple[str, Any, dict[str, Any]]],
) -> None:
    records: list[RawRecord] = [
        make_record({"request_id": f"r{i}", "model": model, "inputs": inputs, **extra})
        for i, (model, inputs, extra) in enumerate(specs)
    ]
    out = admission().admit(records)
    seen = [p.record for p in out.pending] + [o.record for o in out.ended]
    assert sorted(map(id, seen)) == sorted(map(id, records))
    for outcome in out.ended:
        assert outcome.dead_letter is not None
        assert outcome.result is not None  # every value named its request id
        assert outcome.result.status is Status.REJECTED


def test_a_routed_request_keeps_its_version_when_the_route_changes() -> None:
    """Admission routes once; what is queued finishes on that version (a rollback or a
    promotion only moves the requests admitted after it)."""
    router = Router()
    router.update({"clf": Route(1, "clf@2", 1.0)})
    routed = Admission(
        adapter_for=lambda name: ADAPTER if name in ("clf", "clf@2") else adapter_for(name),
        lane_of_topic=LANE_OF_TOPIC,
        max_bytes=10_000,
        reply_to_allowed=TopicConfig().reply_to_allowed,
        route=router.route,
    )
    [before] = routed.admit([make_record(good("a"))]).pending
    router.update({})  # rolled back
    [after] = routed.admit([make_record(good("b"))]).pending
    assert (before.model, before.request.model) == ("clf@2", "clf")
    assert (after.model, after.serving) == ("clf", None)
    [refused] = routed.admit([make_record(good("c", model="clf@2"))]).ended
    assert refused.result is not None and refused.result.error is not None
    assert refused.result.error.code == "unknown_model"  # requests cannot name a candidate
