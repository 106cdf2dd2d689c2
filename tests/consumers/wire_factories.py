"""Factory helpers for consumer tests: real records and request bodies, no Kafka."""

from __future__ import annotations

from typing import Any

import orjson

from consumers.records import RawRecord, SourceRef

TOPIC = "inferlane.requests"


def body(**overrides: Any) -> dict[str, Any]:
    """A valid request body; ``overrides`` replace or add fields (``None`` values kept)."""
    value: dict[str, Any] = {"request_id": "req-1", "model": "digits", "inputs": [1.0, 2.0]}
    value.update(overrides)
    return value


def raw(
    value: bytes | dict[str, Any] | None,
    *,
    key: bytes | None = None,
    topic: str = TOPIC,
    partition: int = 0,
    offset: int = 0,
    received_s: float = 100.0,
) -> RawRecord:
    data = orjson.dumps(value) if isinstance(value, dict) else value
    return RawRecord(SourceRef(topic, partition, offset), key, data, received_s)
