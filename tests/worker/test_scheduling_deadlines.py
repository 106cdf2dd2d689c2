"""Deadlines at admission: timeouts count from the record's Kafka timestamp."""

from __future__ import annotations

import time

import pytest
from pipeline_factories import LANE_OF_TOPIC, LOW_TOPIC, NORMAL_TOPIC, classifier, record

from consumers.contract import Priority
from worker.intake.admission import Admission
from worker.models import Adapter
from worker.settings import TopicConfig

TIMEOUTS = {Priority.HIGH: 100, Priority.NORMAL: None, Priority.LOW: 60_000}


def admission() -> Admission:
    adapter: Adapter = classifier()
    return Admission(
        adapter_for=lambda _: adapter,
        lane_of_topic=LANE_OF_TOPIC,
        max_bytes=10_000,
        reply_to_allowed=TopicConfig().reply_to_allowed,
        lane_timeouts_ms=TIMEOUTS,
    )


def deadline(topic: str = NORMAL_TOPIC, *, produced_ago_s: float | None, **fields: object) -> float:
    """The admitted deadline minus the record's receipt (monotonic) time."""
    received = time.monotonic()
    value = {"request_id": "r", "model": "clf", "inputs": [1, 2, 3, 4], **fields}
    raw = record(value, topic=topic, received_s=received)
    if produced_ago_s is not None:
        raw = raw._replace(timestamp_ms=int((time.time() - produced_ago_s) * 1000))
    (pending,) = admission().admit([raw]).pending
    assert pending.deadline_s is not None
    return pending.deadline_s - received


def test_a_timeout_counts_from_the_kafka_timestamp_so_a_replay_gets_no_fresh_one() -> None:
    # Produced 5 s ago (a restart replays it): a 3 s timeout has already passed.
    assert deadline(produced_ago_s=5.0, timeout_ms=3000) == pytest.approx(-2.0, abs=0.05)
    assert deadline(produced_ago_s=1.0, timeout_ms=3000) == pytest.approx(2.0, abs=0.05)


def test_without_a_timestamp_or_with_one_ahead_of_receipt_it_counts_from_receipt() -> None:
    assert deadline(produced_ago_s=None, timeout_ms=3000) == pytest.approx(3.0, abs=0.01)
    assert deadline(produced_ago_s=-10.0, timeout_ms=3000) == pytest.approx(3.0, abs=0.01)


def test_lane_default_timeouts_apply_only_to_requests_without_their_own() -> None:
    assert deadline(LOW_TOPIC, produced_ago_s=0.0) == pytest.approx(60.0, abs=0.05)
    assert deadline(LOW_TOPIC, produced_ago_s=0.0, timeout_ms=500) == pytest.approx(0.5, abs=0.05)
    absolute = int(time.time() * 1000) + 2000
    assert deadline(LOW_TOPIC, produced_ago_s=0.0, deadline_ms=absolute) == pytest.approx(
        2.0, abs=0.05
    )
    raw = record({"request_id": "r", "model": "clf", "inputs": [1, 2, 3, 4]})
    (pending,) = admission().admit([raw]).pending  # normal lane: no default
    assert pending.deadline_s is None
