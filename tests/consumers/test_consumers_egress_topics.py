"""Egress keeps the partitions and producer metadata of a bounded set of topics: a
producer naming a new ``reply_to`` topic per request does not grow them; ``at_once``
records leave without the producer's linger."""

from __future__ import annotations

import time

import pytest

import consumers.egress
from consumers.egress import Egress, OutRecord
from worker.intake.broker import EmbeddedBroker

RESULTS = "inferlane.results"


async def test_topics_past_the_bound_are_forgotten_then_found_again(
    broker: EmbeddedBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(consumers.egress, "MAX_KNOWN_TOPICS", 4)
    egress = Egress(
        bootstrap=broker.bootstrap,
        client_id="t",
        linger_ms=1,
        max_request_bytes=1 << 20,
        stable_topics=frozenset({RESULTS}),
    )
    await egress.start()
    try:
        topics = [RESULTS, *(f"inferlane.results.t{i}" for i in range(10))]
        for topic in topics:  # the broker creates each on first use
            assert await egress.publish([OutRecord(topic, b"k", b"v")]) == []
        tracked = egress._producer.client._topics
        assert set(egress._partitions) == set(topics[-4:])
        assert tracked == {RESULTS, *topics[-4:]}
        # A forgotten topic is looked up again, and becomes the most recent.
        assert await egress.publish([OutRecord(topics[1], b"k", b"v")]) == []
        assert list(egress._partitions)[-1] == topics[1] and len(egress._partitions) == 4
    finally:
        await egress.stop()


async def test_at_once_leaves_without_the_producers_linger(broker: EmbeddedBroker) -> None:
    """Streamed chunks must not wait ``linger_ms``: a closed batch is sent at once."""
    egress = Egress(
        bootstrap=broker.bootstrap, client_id="t", linger_ms=400, max_request_bytes=1 << 20
    )
    await egress.start()
    try:
        record = [OutRecord(RESULTS, b"k", b"v")]
        assert await egress.publish(record) == []  # metadata known: both timed alike
        timed = {}
        for at_once in (False, True, False, True):
            started = time.monotonic()
            assert await egress.publish(record, at_once=at_once) == []
            timed[at_once] = time.monotonic() - started
    finally:
        await egress.stop()
    assert timed[False] >= 0.4
    assert timed[True] < 0.2
