"""The bench's results reader counts each result once, on the real embedded broker: a
reset of its position that brings records again must not pass for more results (a
priority run once counted more backlog results than the worker had produced)."""

from __future__ import annotations

import time

from bench.kafka_io import TOPICS, ResultsReader, create_topics, publish
from worker.intake.broker import EmbeddedBroker


def _records(first: int, n: int) -> list[tuple[bytes, bytes]]:
    return [(b"r-%d" % i, b'{"request_id": "r-%d"}' % i) for i in range(first, first + n)]


async def test_records_read_again_after_a_reset_count_once(broker: EmbeddedBroker) -> None:
    await create_topics(broker.bootstrap)
    await publish(broker.bootstrap, TOPICS.results, _records(0, 60))
    reader = await ResultsReader(broker.bootstrap).start()
    try:
        assert await reader.until(60, timeout_s=20)
        consumer = reader._consumer
        assert consumer is not None
        await consumer.seek_to_beginning()  # what a reset of the position does
        deadline = time.monotonic() + 20
        while reader.repeats < 60 and time.monotonic() < deadline:
            await reader.poll()
        assert reader.repeats == 60
        assert reader.count == 60 and reader.skipped == 0
        assert sorted(reader.values()) == sorted(v for _, v in _records(0, 60))

        await publish(broker.bootstrap, TOPICS.results, _records(60, 15))
        assert await reader.until(75, timeout_s=20)
        assert reader.count == 75 and reader.repeats == 60
        assert len(set(reader.values())) == 75
    finally:
        await reader.stop()


async def test_offsets_jumped_over_are_counted_as_skipped(broker: EmbeddedBroker) -> None:
    await create_topics(broker.bootstrap)
    await publish(broker.bootstrap, TOPICS.results, _records(0, 30))
    reader = await ResultsReader(broker.bootstrap).start()
    try:
        assert await reader.until(30, timeout_s=20)
        await publish(broker.bootstrap, TOPICS.results, _records(30, 90))
        consumer = reader._consumer
        assert consumer is not None
        # Move every partition 2 records past where the reader stands.
        for tp in consumer.assignment():
            consumer.seek(tp, await consumer.position(tp) + 2)
        deadline = time.monotonic() + 20
        while reader.count + reader.skipped < 120 and time.monotonic() < deadline:
            await reader.poll()
        partitions = len(consumer.assignment())
        assert reader.skipped == 2 * partitions
        assert reader.count == 120 - 2 * partitions and reader.repeats == 0
    finally:
        await reader.stop()
