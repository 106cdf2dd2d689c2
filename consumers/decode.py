"""bytes -> InferenceRequest, or a typed failure carried as a value (never raised)."""

from __future__ import annotations

from dataclasses import dataclass

import orjson
from pydantic import ValidationError

from consumers.contract import InferenceRequest
from consumers.errors import BadRecord, InferlaneError, PayloadTooLarge
from consumers.records import RawRecord

MAX_ID_CHARS = 128


@dataclass(frozen=True, slots=True)
class DecodeFailure:
    record: RawRecord
    error: InferlaneError
    request_id: str | None  # known when the value or the key names one


def decode(record: RawRecord, *, max_bytes: int) -> InferenceRequest | DecodeFailure:
    value = record.value
    if value is None:
        return _fail(record, BadRecord("record has no value (tombstone)"), None)
    if len(value) > max_bytes:
        error = PayloadTooLarge(f"value is {len(value)} bytes; the limit is {max_bytes}")
        return _fail(record, error, None)
    try:
        # orjson rejects NaN/Infinity literals and invalid UTF-8, as the contract requires.
        parsed = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        return _fail(record, BadRecord(f"value is not UTF-8 JSON: {exc}"), None)
    if not isinstance(parsed, dict):
        kind = type(parsed).__name__
        return _fail(record, BadRecord(f"value must be a JSON object, got {kind}"), None)
    try:
        return InferenceRequest.model_validate(parsed)
    except ValidationError as exc:
        return _fail(record, BadRecord(_describe(exc)), _id_of(parsed))


def _fail(record: RawRecord, error: InferlaneError, request_id: str | None) -> DecodeFailure:
    return DecodeFailure(record, error, request_id or _key_id(record.key))


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_input=False, include_url=False)[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "value"
        parts.append(f"{where}: {err['msg']}")
    return "invalid request: " + "; ".join(parts)


def _id_of(parsed: dict[str, object]) -> str | None:
    rid = parsed.get("request_id")
    return rid if isinstance(rid, str) and _usable_id(rid) else None


def _key_id(key: bytes | None) -> str | None:
    # The key is the recommended request id; use it when the value cannot say.
    if not key or len(key) > 4 * MAX_ID_CHARS:
        return None
    try:
        rid = key.decode()
    except UnicodeDecodeError:
        return None
    return rid if _usable_id(rid) else None


def _usable_id(rid: str) -> bool:
    """An id the rejected result can carry into SQL (see ``contract.RequestId``)."""
    return 0 < len(rid) <= MAX_ID_CHARS and "\x00" not in rid
