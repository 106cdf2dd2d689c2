"""Reading what the workers wrote to Kafka: results per id, dead letters per source.

Reads to the fetch high watermark (``read_to_end``), again until every expected id has
been seen: the embedded broker's end offsets count batches, not records.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

import orjson
from kafka import KafkaConsumer, TopicPartition
from kafka.consumer.fetcher import ConsumerRecord

from consumers.client import READER_CONFIG, read_to_end
from consumers.contract import DeadLetterHeaders


def _read(bootstrap: str, topic: str) -> list[ConsumerRecord]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **READER_CONFIG)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        return read_to_end(consumer, tps, timeout_s=120)
    finally:
        consumer.close()


def result_counts(bootstrap: str, topic: str, expected: set[str], timeout_s: float) -> Counter[str]:
    """How many times each request id appears on the results topic (read again until
    every expected id is there, or ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        seen = Counter(orjson.loads(r.value)["request_id"] for r in _read(bootstrap, topic))
        if expected <= seen.keys() or time.monotonic() > deadline:
            return seen


@dataclass
class DeadLetters:
    codes: Counter[str] = field(default_factory=Counter)  # error code -> count
    sources: set[tuple[int, int]] = field(default_factory=set)  # (partition, offset)
    without_reason: int = 0  # dead letters with an empty error message


def dead_letters(bootstrap: str, topic: str) -> DeadLetters:
    found = DeadLetters()
    for record in _read(bootstrap, topic):
        headers = dict(record.headers)
        found.codes[headers[DeadLetterHeaders.CODE].decode()] += 1
        found.without_reason += not headers.get(DeadLetterHeaders.MESSAGE)
        found.sources.add(
            (int(headers[DeadLetterHeaders.PARTITION]), int(headers[DeadLetterHeaders.OFFSET]))
        )
    return found
