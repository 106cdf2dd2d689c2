"""Admission: raw records become lane-ready requests, or outcomes that end them at once.

Runs off the event loop, one fetched chunk per call: decode, choose the version that
answers (a rollout may route the request to a candidate), find its adapter, prepare
inputs, fix the deadline. Every record yields exactly one of the two.

A relative timeout (the request's ``timeout_ms``, else its lane's default) counts from
the record's Kafka timestamp, when it was produced, so a replay after a restart gives
no fresh timeout; a timestamp ahead of receipt (a producer's clock running fast) or
absent counts from receipt.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from consumers.contract import InferenceRequest, Priority
from consumers.decode import DecodeFailure, decode
from consumers.errors import InferlaneError, ReplyToNotAllowed
from consumers.records import RawRecord
from worker.base.outcomes import rejected
from worker.base.pending import Outcome, Pending
from worker.models import Adapter


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
        lane_timeouts_ms: Mapping[Priority, int | None] | None = None,
        route: Callable[[str, str], str] = lambda model, _: model,
    ) -> None:
        self._adapter_for = adapter_for  # raises UnknownModel
        self._route = route  # (model, request id) -> registry key of the answering version
        self._lane_of_topic = lane_of_topic
        self._max_bytes = max_bytes
        self._reply_to_allowed = reply_to_allowed
        self._lane_timeouts_ms = dict(lane_timeouts_ms or {})

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
        key = self._route(request.model, request.request_id)
        adapter = self._adapter_for(key)
        item = adapter.prepare(request.inputs)
        if request.expected is not None:  # a label that cannot be one rejects the request
            adapter.check_expected(request.expected)
        return Pending(
            request=request,
            item=item,
            cost=adapter.cost(item),
            lane=lane,
            record=record,
            deadline_s=self._deadline_s(request, record, lane, wall_minus_mono_ms),
            serving=None if key == request.model else key,
        )

    def _deadline_s(
        self, request: InferenceRequest, record: RawRecord, lane: Priority, offset_ms: float
    ) -> float | None:
        timeout_ms = request.timeout_ms
        if timeout_ms is None and request.deadline_ms is None:
            timeout_ms = self._lane_timeouts_ms.get(lane)
        return deadline_s(request, timeout_ms, record, offset_ms)


def deadline_s(
    request: InferenceRequest, timeout_ms: int | None, record: RawRecord, offset_ms: float
) -> float | None:
    """Monotonic deadline: the earlier of the relative timeout (from the record's
    production) and the absolute deadline. ``offset_ms``: wall clock minus monotonic."""
    candidates = []
    if timeout_ms is not None:
        start_s = record.received_s
        if record.timestamp_ms is not None and record.timestamp_ms >= 0:
            start_s = min(start_s, (record.timestamp_ms - offset_ms) / 1000)
        candidates.append(start_s + timeout_ms / 1000)
    if request.deadline_ms is not None:
        candidates.append((request.deadline_ms - offset_ms) / 1000)
    return min(candidates) if candidates else None
