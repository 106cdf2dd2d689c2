"""The ingress fetches urgent topics on a consumer of their own (real broker): each fetch
returns one kind, pausing reaches that consumer, and a new member of the group resumes
the urgent topic where the group committed; each consumer polls slowly when told (bulk)
or when quiet (urgent)."""

from __future__ import annotations

import asyncio
import gc
import time
import weakref
from collections.abc import Awaitable, Callable

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.protocol.fetch import FetchRequest
from kafka import KafkaProducer

from consumers import ingress as ingress_module
from consumers.config import KafkaConfig
from consumers.ingress import FetchWaits, Ingress
from consumers.offsets import TopicPartitionKey
from consumers.records import RawRecord
from consumers.topics import ensure_topics
from worker.intake.broker import EmbeddedBroker

URGENT, BULK = "urgent", "bulk"


def ingress(bootstrap: str) -> Ingress:
    config = KafkaConfig(
        group_id="g", client_id="c", fetch_max_records=100, max_message_bytes=4096,
        session_timeout_ms=6_000,
    )  # fmt: skip
    waits = FetchWaits(bulk=10, urgent=10, busy_bulk=200, quiet_urgent=200)
    return Ingress(bootstrap, config, topics=[URGENT, BULK], urgent_topics={URGENT}, waits=waits)


async def started(bootstrap: str) -> tuple[Ingress, asyncio.Event]:
    joined = asyncio.Event()

    async def on_assigned(_: set[TopicPartitionKey]) -> None:
        joined.set()

    async def on_revoked(_: set[TopicPartitionKey]) -> None:
        return None

    consumer = ingress(bootstrap)
    await consumer.start(on_assigned, on_revoked)
    return consumer, joined


async def published(bootstrap: str, counts: dict[str, int]) -> None:
    """Both topics, one partition each; ``counts[topic]`` records on each ("b0", "u0", ...)."""
    await ensure_topics(bootstrap, [URGENT, BULK], partitions=1)
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=50)
    for topic, n in counts.items():
        for i in range(n):
            producer.send(topic, f"{topic[0]}{i}".encode())
    producer.flush()
    producer.close()


async def fetch_n(consumer: Ingress, n: int, *, urgent: bool) -> list[RawRecord]:
    got: list[RawRecord] = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        got += await consumer.fetch(100, urgent=urgent)
    return got


async def test_urgent_topics_are_read_apart_and_resume_at_the_group_commit(
    broker: EmbeddedBroker,
) -> None:
    await published(broker.bootstrap, {BULK: 30, URGENT: 5})

    consumer, joined = await started(broker.bootstrap)
    try:
        await asyncio.wait_for(joined.wait(), 30)
        assert consumer.has_urgent
        assert consumer.assignment() == {(URGENT, 0), (BULK, 0)}
        urgent = await fetch_n(consumer, 5, urgent=True)
        assert [r.value for r in urgent] == [f"u{i}".encode() for i in range(5)]
        bulk = await fetch_n(consumer, 30, urgent=False)
        assert [r.value for r in bulk] == [f"b{i}".encode() for i in range(30)]

        assert consumer.paused() == set()
        consumer.set_paused({URGENT})
        assert consumer.paused() == {(URGENT, 0)}
        consumer.set_paused({BULK})
        assert consumer.paused() == {(BULK, 0)}

        await consumer.commit({(URGENT, 0): 3, (BULK, 0): 30})
        assert await consumer.committed((URGENT, 0)) == 3
    finally:
        await consumer.stop()

    again, joined = await started(broker.bootstrap)
    try:
        await asyncio.wait_for(joined.wait(), 30)
        resumed = await fetch_n(again, 2, urgent=True)
        assert [r.value for r in resumed] == [b"u3", b"u4"]
        assert [r.source.offset for r in resumed] == [3, 4]
    finally:
        await again.stop()


async def test_holding_a_partition_keeps_its_fetched_records(broker: EmbeddedBroker) -> None:
    """aiokafka's pause throws a partition's fetched data away (inside a reference cycle
    that only a full collector pass frees) and fetches it again; holding leaves it in
    the consumer, and releasing goes on from the next record."""
    await published(broker.bootstrap, {BULK: 1000})  # one fetch: more than max_records

    consumer, joined = await started(broker.bootstrap)
    try:
        await asyncio.wait_for(joined.wait(), 30)
        first = await fetch_n(consumer, 1, urgent=False)
        assert len(first) < 1000
        fetched = [
            weakref.ref(o) for o in gc.get_objects() if type(o).__name__ == "PartitionRecords"
        ]
        assert fetched  # the rest of that fetch, waiting in the consumer
        consumer.set_paused({BULK})
        assert consumer.paused() == {(BULK, 0)}
        for _ in range(3):
            assert await consumer.fetch(50, urgent=False) == []
        gc.collect()
        assert any(ref() is not None for ref in fetched)  # kept, not thrown away
        consumer.set_paused(set())
        rest = await fetch_n(consumer, 1000 - len(first), urgent=False)
        assert [r.source.offset for r in first + rest] == list(range(1000))
    finally:
        await consumer.stop()


async def test_a_fetch_takes_no_more_than_asked_and_the_rest_follows(
    broker: EmbeddedBroker,
) -> None:
    await published(broker.bootstrap, {BULK: 300})
    consumer, joined = await started(broker.bootstrap)
    try:
        await asyncio.wait_for(joined.wait(), 30)
        taken: list[int] = []
        while not taken:
            taken = [r.source.offset for r in await consumer.fetch(1000, max_records=7)]
        assert taken == list(range(7))
        assert await consumer.fetch(50, max_records=0) == []
        rest = await fetch_n(consumer, 300 - 7, urgent=False)
        assert [r.source.offset for r in rest] == list(range(7, 300))
    finally:
        await consumer.stop()


def fetches_sent(monkeypatch: pytest.MonkeyPatch, consumer: AIOKafkaConsumer) -> list[int]:
    """A running count of the fetch requests ``consumer``'s real client sends."""
    sent = [0]
    client = consumer._client
    send = client.send

    async def counting(node_id: int, request: object, *args: object, **kwargs: object) -> object:
        sent[0] += isinstance(request, FetchRequest)
        return await send(node_id, request, *args, **kwargs)

    monkeypatch.setattr(client, "send", counting)
    return sent


async def fetches_in(sent: list[int], seconds: float, poll: Callable[[], Awaitable[object]]) -> int:
    before, end = sent[0], time.monotonic() + seconds
    while time.monotonic() < end:
        await poll()
    return sent[0] - before


async def test_the_bulk_consumer_polls_slowly_while_told_the_worker_is_busy(
    broker: EmbeddedBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    await published(broker.bootstrap, {BULK: 1, URGENT: 0})
    consumer, joined = await started(broker.bootstrap)
    try:
        await asyncio.wait_for(joined.wait(), 30)
        await fetch_n(consumer, 1, urgent=False)
        sent = fetches_sent(monkeypatch, consumer._consumer)
        poll = lambda: consumer.fetch(50, urgent=False)  # noqa: E731
        brisk = await fetches_in(sent, 1.0, poll)  # the broker holds each fetch 10 ms
        consumer.pace_bulk(True)
        assert consumer.fetch_waits_ms()[0] == 200
        await asyncio.sleep(0.05)  # the last 10 ms fetch returns
        slow = await fetches_in(sent, 1.0, poll)
        assert brisk >= 25 and slow <= 7, (brisk, slow)
        consumer.pace_bulk(False)
        assert consumer.fetch_waits_ms()[0] == 10
    finally:
        await consumer.stop()


async def test_the_urgent_reader_polls_slowly_once_quiet_and_briskly_after_a_record(
    broker: EmbeddedBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ingress_module, "URGENT_QUIET_AFTER_S", 1.0)
    await published(broker.bootstrap, {BULK: 0, URGENT: 0})
    consumer, joined = await started(broker.bootstrap)
    try:
        await asyncio.wait_for(joined.wait(), 30)
        assert consumer._urgent_reader is not None
        sent = fetches_sent(monkeypatch, consumer._urgent_reader)
        poll = lambda: consumer.fetch(50, urgent=True)  # noqa: E731
        await fetches_in(sent, 1.1, poll)  # no record: quiet from here on
        assert consumer.fetch_waits_ms()[1] == 200
        quiet = await fetches_in(sent, 1.0, poll)
        assert quiet <= 7, quiet
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
        producer.send(URGENT, b"u0").get(timeout=10)
        producer.close()
        assert [r.value for r in await fetch_n(consumer, 1, urgent=True)] == [b"u0"]
        await consumer.fetch(50, urgent=True)
        assert consumer.fetch_waits_ms()[1] == 10
    finally:
        await consumer.stop()
