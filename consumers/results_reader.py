"""Reading results and dead letters back from Kafka: by request id, or following the topics.

Reads by assigning partitions (no consumer group), with kafka-python like the client.
By id it reads both topics from the beginning until it has caught up with the high
watermarks that fetches report (never ``end_offsets()``: the embedded broker answers
those with a count of record batches) and has seen every id, or until a timeout.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from types import TracebackType

import orjson
from kafka import KafkaConsumer, TopicPartition
from kafka.consumer.fetcher import ConsumerRecord
from pydantic import ValidationError

from consumers.client import DEFAULT_RESULTS, READER_CONFIG, caught_up, skip_to_end
from consumers.contract import InferenceResult
from consumers.security import KafkaSecurity

DEFAULT_DEAD_LETTERS = "inferlane.requests.dlq"


@dataclass(frozen=True, slots=True)
class ReadBack:
    """One record of the results or dead-letter topic."""

    topic: str
    partition: int
    offset: int
    request_id: str | None
    result: InferenceResult | None  # a result; None: a dead letter
    headers: dict[str, str] = field(default_factory=dict)  # a dead letter's
    value: bytes = b""  # a dead letter's original bytes

    @property
    def dead_letter(self) -> bool:
        return self.result is None


@dataclass
class Lookup:
    """What reading by id found: records per id, in the order read, and the ids not seen."""

    found: dict[str, list[ReadBack]]
    missing: list[str]
    records_read: int
    seconds: float


class ResultsReader:
    def __init__(
        self,
        bootstrap: str,
        *,
        results_topic: str = DEFAULT_RESULTS,
        dead_letter_topic: str = DEFAULT_DEAD_LETTERS,
        security: KafkaSecurity | None = None,
    ) -> None:
        self._results_topic = results_topic
        self._consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            enable_auto_commit=False,
            **READER_CONFIG,
            **(security or KafkaSecurity()).kafka_python_kwargs(),
        )
        self._tps = [
            TopicPartition(topic, p)
            for topic in (results_topic, dead_letter_topic)
            for p in sorted(self._consumer.partitions_for_topic(topic) or ())
        ]
        self._consumer.assign(self._tps)

    def find(self, ids: Iterable[str], *, timeout_s: float) -> Lookup:
        """Every record for ``ids`` from the beginning of both topics: read until caught
        up with every id seen, or until ``timeout_s`` (ids still unseen are missing)."""
        wanted = list(dict.fromkeys(ids))
        found: dict[str, list[ReadBack]] = {}
        read = 0
        started = time.monotonic()
        self._consumer.seek_to_beginning(*self._tps)
        while True:
            for records in self._consumer.poll(timeout_ms=200).values():
                read += len(records)
                for back in self._read_backs(records):
                    if back.request_id in wanted:
                        found.setdefault(back.request_id, []).append(back)
            done = all(i in found for i in wanted) and all(
                caught_up(self._consumer, tp) for tp in self._tps
            )
            elapsed = time.monotonic() - started
            if done or elapsed >= timeout_s:
                missing = [i for i in wanted if i not in found]
                return Lookup(found, missing, read, elapsed)

    def follow(self, stop: threading.Event | None = None) -> Iterator[ReadBack]:
        """Each record that arrives from now on, until the caller stops or ``stop`` is
        set (seen within half a second); the topics' current ends are found before
        this returns."""
        skip_to_end(self._consumer, self._tps)
        return self._arriving(stop or threading.Event())

    def _arriving(self, stop: threading.Event) -> Iterator[ReadBack]:
        while not stop.is_set():
            for records in self._consumer.poll(timeout_ms=500).values():
                yield from self._read_backs(records)

    def _read_backs(self, records: list[ConsumerRecord]) -> Iterator[ReadBack]:
        for record in records:
            where = (record.topic, record.partition, record.offset)
            if record.topic != self._results_topic:
                headers = {k: v.decode("utf-8", "replace") for k, v in record.headers or ()}
                rid = _id_in(record.value) or _key(record.key)
                yield ReadBack(*where, rid, None, headers, record.value or b"")
                continue
            try:
                result = InferenceResult.model_validate_json(record.value)
            except ValidationError:
                continue  # not a result (someone else wrote to the topic)
            yield ReadBack(*where, result.request_id, result)

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> ResultsReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _key(key: bytes | None) -> str | None:
    return None if key is None else key.decode("utf-8", "replace")


def _id_in(value: bytes | None) -> str | None:
    """The request id inside a dead letter's value, when it is JSON that has one."""
    try:
        rid = orjson.loads(value or b"").get("request_id")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return rid if isinstance(rid, str) else None
