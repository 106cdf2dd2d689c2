"""Factory helpers for worker tests: real records, requests and pending items; no Kafka."""

from __future__ import annotations

import itertools
import json
from typing import Any

from consumers.contract import InferenceRequest, Priority
from consumers.records import RawRecord, SourceRef
from worker.base.pending import Pending
from worker.models import ClassifierAdapter

NORMAL_TOPIC = "inferlane.requests"
HIGH_TOPIC = "inferlane.requests.high"
LOW_TOPIC = "inferlane.requests.low"
LANE_OF_TOPIC = {HIGH_TOPIC: Priority.HIGH, NORMAL_TOPIC: Priority.NORMAL, LOW_TOPIC: Priority.LOW}

_offsets = itertools.count()
_ids = itertools.count()


def classifier() -> ClassifierAdapter:
    """A 4-feature, 3-class classifier adapter (inputs: 4 numbers or 2x2)."""
    return ClassifierAdapter(features=4, num_classes=3, shapes=[(2, 2)])


def record(
    value: bytes | dict[str, Any] | None = b"{}",
    *,
    key: bytes | None = None,
    topic: str = NORMAL_TOPIC,
    partition: int = 0,
    offset: int | None = None,
    received_s: float = 100.0,
) -> RawRecord:
    data = json.dumps(value, allow_nan=False).encode() if isinstance(value, dict) else value
    where = SourceRef(topic, partition, next(_offsets) if offset is None else offset)
    return RawRecord(where, key, data, received_s)


def request(request_id: str | None = None, model: str = "m", **fields: Any) -> InferenceRequest:
    fields.setdefault("inputs", [0.0, 0.0, 0.0, 0.0])
    rid = request_id or f"r{next(_ids)}"
    return InferenceRequest(request_id=rid, model=model, **fields)


def pending(
    model: str = "m",
    *,
    lane: Priority = Priority.NORMAL,
    received_s: float = 0.0,
    cost: int = 1,
    deadline_s: float | None = None,
    request_id: str | None = None,
    **fields: Any,
) -> Pending:
    req = request(request_id, model, **fields)
    return Pending(
        request=req,
        item=classifier().prepare(req.inputs),
        cost=cost,
        lane=lane,
        record=record(key=req.request_id.encode(), received_s=received_s),
        deadline_s=deadline_s,
    )
