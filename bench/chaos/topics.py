"""Reading what the workers wrote to Kafka: results per id, dead letters per source.

Reads until every expected id has been seen and then until a fetch brings nothing and
each partition's position equals the high watermark of the last fetch: the embedded
broker's end offsets count batches, not records, so they cannot say where the end is.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson
from kafka import KafkaConsumer, TopicPartition
from kafka.consumer.fetcher import ConsumerRecord

from consumers.client import READER_CONFIG
from consumers.contract import DeadLetterHeaders


class TopicReader:
    def __init__(self, bootstrap: str, topic: str) -> None:
        self._consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, enable_auto_commit=False, **READER_CONFIG
        )
        parts = self._consumer.partitions_for_topic(topic) or set()
        self._tps = [TopicPartition(topic, p) for p in sorted(parts)]
        self._consumer.assign(self._tps)
        self._consumer.seek_to_beginning(*self._tps)

    def read(
        self,
        on_record: Callable[[ConsumerRecord], None],
        done: Callable[[], bool],
        timeout_s: float,
    ) -> bool:
        """Feed records to ``on_record`` until ``done()`` and the topic is drained."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            batches = self._consumer.poll(timeout_ms=300, max_records=20_000)
            for records in batches.values():
                for record in records:
                    on_record(record)
            if not batches and done() and self._at_highwater():
                return True
        return False

    def _at_highwater(self) -> bool:
        for tp in self._tps:
            high = self._consumer.highwater(tp)
            if high is not None and self._consumer.position(tp) < high:
                return False
        return True

    def close(self) -> None:
        self._consumer.close()


def result_counts(bootstrap: str, topic: str, expected: set[str], timeout_s: float) -> Counter[str]:
    """How many times each request id appears on the results topic."""
    seen: Counter[str] = Counter()
    reader = TopicReader(bootstrap, topic)
    try:
        reader.read(
            lambda r: seen.update([orjson.loads(r.value)["request_id"]]),
            lambda: expected <= seen.keys(),
            timeout_s,
        )
    finally:
        reader.close()
    return seen


@dataclass
class DeadLetters:
    codes: Counter[str] = field(default_factory=Counter)  # error code -> count
    sources: set[tuple[int, int]] = field(default_factory=set)  # (partition, offset)


def dead_letters(bootstrap: str, topic: str, timeout_s: float) -> DeadLetters:
    found = DeadLetters()

    def take(record: ConsumerRecord) -> None:
        headers = dict(record.headers)
        found.codes[headers[DeadLetterHeaders.CODE].decode()] += 1
        found.sources.add(
            (int(headers[DeadLetterHeaders.PARTITION]), int(headers[DeadLetterHeaders.OFFSET]))
        )

    reader = TopicReader(bootstrap, topic)
    try:
        reader.read(take, lambda: True, timeout_s)
    finally:
        reader.close()
    return found
