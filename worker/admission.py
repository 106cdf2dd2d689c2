"""Admission: raw records become lane-ready requests, or outcomes that end them at once.

Runs off the event loop, one fetched chunk per call: decode, find the model's
adapter, prepare inputs, fix the deadline. Every record yields exactly one of the two.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from consumers.contract import InferenceRequest, Priority
from consumers.decode import DecodeFailure, decode
from consumers.errors import InferlaneError, ReplyToNotAllowed
from consumers.records import RawRecord
from worker.models import Adapter
from worker.outcomes import rejected
from worker.pending import Outcome, Pending


@dataclass(slots=True)
class Admitted:
    pending: list[Pending] = field(default_factory=list)
    ended: list[Outcome] = field(default_factory=list)


class Admission:
    def __init__(
        self,
        *,
        adapter_for: Callable[[str], Adapter],
        lane_of_topic: dict[str, Priority],
        max_bytes: int,
        reply_to_allowed: Callable[[str], bool],
    ) -> None:
        self._adapter_for = adapter_for  # raises UnknownModel
        self._lane_of_topic = lane_of_topic
        self._max_bytes = max_bytes
        self._reply_to_allowed = reply_to_allowed

    def admit(self, records: Sequence[RawRecord]) -> Admitted:
        out = Admitted()
        wall_minus_mono_ms = time.time() * 1000 - time.monotonic() * 1000
        for record in records:
            topic_lane = self._lane_of_topic.get(record.source.topic, Priority.NORMAL)
            decoded = decode(record, max_bytes=self._max_bytes)
            if isinstance(decoded, DecodeFailure):
                error, rid = decoded.error, decoded.request_id
                out.ended.append(rejected(record, error, rid, None, topic_lane))
                continue
            lane = decoded.priority or topic_lane
            try:
                out.pending.append(self._prepare(record, decoded, lane, wall_minus_mono_ms))
            except InferlaneError as exc:
                out.ended.append(rejected(record, exc, decoded.request_id, decoded, lane))
        return out

    def _prepare(
        self,
        record: RawRecord,
        request: InferenceRequest,
        lane: Priority,
        wall_minus_mono_ms: float,
    ) -> Pending:
        if request.reply_to is not None and not self._reply_to_allowed(request.reply_to):
            raise ReplyToNotAllowed(
                f"reply_to {request.reply_to!r} is not an allowed results topic"
            )
        adapter = self._adapter_for(request.model)
        item = adapter.prepare(request.inputs)
        return Pending(
            request=request,
            item=item,
            cost=adapter.cost(item),
            lane=lane,
            record=record,
            deadline_s=_deadline_s(request, record.received_s, wall_minus_mono_ms),
        )


def _deadline_s(request: InferenceRequest, received_s: float, offset_ms: float) -> float | None:
    """Monotonic deadline: the earlier of the relative timeout and the absolute deadline."""
    candidates = []
    if request.timeout_ms is not None:
        candidates.append(received_s + request.timeout_ms / 1000)
    if request.deadline_ms is not None:
        candidates.append((request.deadline_ms - offset_ms) / 1000)
    return min(candidates) if candidates else None
