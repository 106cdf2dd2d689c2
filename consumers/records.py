"""Typed views of what crosses the wire: a consumed record and a dead letter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from consumers.contract import DeadLetterHeaders
from consumers.errors import InferlaneError


# NamedTuples: built once per consumed record, where a frozen dataclass costs 2-3x more.
class SourceRef(NamedTuple):
    """Where a record came from: its identity for offsets and dead-letter headers."""

    topic: str
    partition: int
    offset: int


class RawRecord(NamedTuple):
    source: SourceRef
    key: bytes | None
    value: bytes | None
    received_s: float  # time.monotonic() at receipt
    timestamp_ms: int | None = None  # the record's Kafka timestamp (epoch ms), if any

    def __repr__(self) -> str:  # payloads stay out of logs
        size = -1 if self.value is None else len(self.value)
        return f"RawRecord({self.source}, value_bytes={size})"


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """The original bytes, untouched, with headers that say why and from where."""

    source: SourceRef
    key: bytes | None
    value: bytes | None
    code: str
    message: str

    @classmethod
    def of(cls, record: RawRecord, error: InferlaneError) -> DeadLetter:
        return cls(record.source, record.key, record.value, error.code, error.message)

    def headers(self) -> list[tuple[str, bytes]]:
        return [
            (DeadLetterHeaders.CODE, self.code.encode()),
            # Headers are not for megabytes: keep the reason readable and bounded.
            (DeadLetterHeaders.MESSAGE, self.message[:1024].encode()),
            (DeadLetterHeaders.TOPIC, self.source.topic.encode()),
            (DeadLetterHeaders.PARTITION, str(self.source.partition).encode()),
            (DeadLetterHeaders.OFFSET, str(self.source.offset).encode()),
        ]
