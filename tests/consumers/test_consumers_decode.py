"""decode(): bytes become a request, or a failure carried as a value (never raised)."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wire_factories import body, raw

from consumers.contract import InferenceRequest, Priority
from consumers.decode import DecodeFailure, decode
from consumers.errors import BadRecord, PayloadTooLarge

LIMIT = 4096


def failed(value: object, *, key: bytes | None = None, max_bytes: int = LIMIT) -> DecodeFailure:
    record = raw(value, key=key)  # type: ignore[arg-type]
    out = decode(record, max_bytes=max_bytes)
    assert isinstance(out, DecodeFailure), out
    assert out.record is record
    return out


def test_a_good_request_parses_with_every_field() -> None:
    value = body(
        priority="high",
        timeout_ms=250,
        deadline_ms=1_700_000_000_000,
        expected=3,
        reply_to="replies",
        metadata={"trace": "t1"},
    )
    out = decode(raw(value), max_bytes=LIMIT)

    assert isinstance(out, InferenceRequest)
    assert out.request_id == "req-1"
    assert out.model == "digits"
    assert out.inputs == [1.0, 2.0]
    assert out.priority is Priority.HIGH
    assert (out.timeout_ms, out.deadline_ms) == (250, 1_700_000_000_000)
    assert out.expected == 3
    assert out.reply_to == "replies"
    assert out.metadata == {"trace": "t1"}


def test_optional_fields_default_to_none() -> None:
    out = decode(raw(body()), max_bytes=LIMIT)
    assert isinstance(out, InferenceRequest)
    assert out.priority is None and out.timeout_ms is None and out.deadline_ms is None
    assert out.expected is None and out.reply_to is None and out.metadata is None


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (b"{not json", "not UTF-8 JSON"),
        (b"", "not UTF-8 JSON"),
        (b'{"request_id": "r\xff\xfe", "model": "m", "inputs": 1}', "not UTF-8 JSON"),
        (b"\xef\xbb\xbf{}", "not UTF-8 JSON"),  # a byte-order mark is not JSON
        (b'[{"request_id": "r1"}]', "must be a JSON object, got list"),
        (b"42", "must be a JSON object, got int"),
        (b'"a string"', "must be a JSON object, got str"),
        (b"null", "must be a JSON object, got NoneType"),
        (b'{"request_id": "r1", "model": "m", "inputs": NaN}', "not UTF-8 JSON"),
        (b'{"request_id": "r1", "model": "m", "inputs": Infinity}', "not UTF-8 JSON"),
        (b'{"request_id": "r1", "model": "m", "inputs": [-Infinity]}', "not UTF-8 JSON"),
    ],
)
def test_values_that_are_not_a_json_object_are_bad_records(value: bytes, fragment: str) -> None:
    out = failed(value)
    assert isinstance(out.error, BadRecord)
    assert out.error.code == "bad_record"
    assert fragment in out.error.message


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ({"model": "m", "inputs": 1}, "request_id: Field required"),
        ({"request_id": "r1", "inputs": 1}, "model: Field required"),
        ({"request_id": "r1", "model": "m"}, "inputs: Field required"),
        (body(inputs=None), "inputs must not be null"),
        (body(request_id=""), "request_id: String should have at least 1 character"),
        (body(request_id="x" * 129), "request_id: String should have at most 128 characters"),
        (body(request_id=17), "request_id: Input should be a valid string"),
        (body(model=""), "model:"),
        (body(colour="red"), "colour: Extra inputs are not permitted"),
        (body(priority="urgent"), "priority:"),
        (body(timeout_ms=0), "timeout_ms:"),
        (body(timeout_ms=-5), "timeout_ms:"),
        (body(deadline_ms=1.5), "deadline_ms:"),
        (body(metadata=[1, 2]), "metadata:"),
        (body(reply_to=""), "reply_to:"),
    ],
)
def test_schema_violations_are_bad_records_that_name_the_field(
    value: dict[str, object], fragment: str
) -> None:
    out = failed(value)
    assert out.error.code == "bad_record"
    assert out.error.message.startswith("invalid request: ")
    assert fragment in out.error.message


def test_a_128_char_request_id_is_accepted() -> None:
    out = decode(raw(body(request_id="x" * 128)), max_bytes=LIMIT)
    assert isinstance(out, InferenceRequest)
    assert len(out.request_id) == 128


def test_the_error_message_does_not_echo_the_payload() -> None:
    out = failed(body(inputs="TOP-SECRET-PAYLOAD", priority="urgent", expected="HIDDEN-LABEL"))
    assert "TOP-SECRET-PAYLOAD" not in out.error.message
    assert "urgent" not in out.error.message
    assert "HIDDEN-LABEL" not in out.error.message


def test_the_request_id_comes_from_the_value_when_only_the_schema_fails() -> None:
    out = failed(body(request_id="from-value", model=None), key=b"from-key")
    assert out.request_id == "from-value"


@pytest.mark.parametrize(
    "value",
    [
        body(request_id="", model=None),
        body(request_id="x" * 129, model=None),
        body(request_id=42),
        {"model": "m", "inputs": 1},
        b"{broken",
        b"[1, 2]",
        None,  # tombstone
    ],
)
def test_the_request_id_falls_back_to_the_key(value: object) -> None:
    assert failed(value, key=b"key-id").request_id == "key-id"


@pytest.mark.parametrize("key", [None, b"", b"\xff\xfe not utf-8", b"k" * 129])
def test_no_request_id_when_neither_value_nor_key_names_one(key: bytes | None) -> None:
    assert failed(b"{broken", key=key).request_id is None


def test_a_128_byte_key_is_a_request_id() -> None:
    assert failed(b"{broken", key=b"k" * 128).request_id == "k" * 128


def test_a_tombstone_is_a_bad_record() -> None:
    out = failed(None, key=b"r9")
    assert out.error.code == "bad_record"
    assert "tombstone" in out.error.message
    assert out.request_id == "r9"


def test_a_value_over_the_limit_is_payload_too_large_and_not_parsed() -> None:
    value = b'{"request_id": "in-value"' + b" " * 100 + b"}"
    out = failed(value, key=b"r-key", max_bytes=len(value) - 1)
    assert isinstance(out.error, PayloadTooLarge)
    assert out.error.code == "payload_too_large"
    assert f"value is {len(value)} bytes; the limit is {len(value) - 1}" == out.error.message
    assert out.request_id == "r-key"  # the value is never read


def test_a_value_exactly_at_the_limit_is_decoded() -> None:
    record = raw(body())
    assert record.value is not None
    assert isinstance(decode(record, max_bytes=len(record.value)), InferenceRequest)


@pytest.mark.parametrize("field", ["timeout_ms", "deadline_ms"])
def test_a_boolean_timeout_is_rejected(field: str) -> None:
    out = decode(raw(body(**{field: True})), max_bytes=LIMIT)
    assert isinstance(out, DecodeFailure)


@settings(database=None)
@given(st.binary(max_size=200), st.none() | st.binary(max_size=140))
def test_decode_never_raises_on_arbitrary_bytes(value: bytes, key: bytes | None) -> None:
    out = decode(raw(value, key=key), max_bytes=100)
    assert isinstance(out, InferenceRequest | DecodeFailure)
    if isinstance(out, DecodeFailure):
        assert out.error.code in {"bad_record", "payload_too_large"}
        assert out.request_id is None or 1 <= len(out.request_id) <= 128


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"request_id": "a\x00b"}, "request_id"),
        ({"model": "m\x00"}, "model"),
        ({"model": "m" * 256}, "model"),
        ({"reply_to": "not a topic!"}, "reply_to"),
        ({"reply_to": "t" * 250}, "reply_to"),
    ],
)
def test_values_that_sql_or_kafka_cannot_hold_are_refused_naming_the_field(
    fields: dict[str, object], where: str
) -> None:
    value = {"request_id": "r1", "model": "m", "inputs": [1], **fields}
    failure = decode(raw(orjson.dumps(value)), max_bytes=10_000)
    assert isinstance(failure, DecodeFailure)
    assert failure.error.code == "bad_record" and where in failure.error.message


def test_a_model_name_of_255_characters_is_accepted() -> None:
    value = {"request_id": "r1", "model": "m" * 255, "inputs": [1]}
    assert not isinstance(decode(raw(orjson.dumps(value)), max_bytes=10_000), DecodeFailure)


@pytest.mark.parametrize("key", [b"k\x00", b"k" * 129])
def test_a_key_that_cannot_be_a_request_id_is_not_used_as_one(key: bytes) -> None:
    failure = decode(raw(b"{", key=key), max_bytes=10_000)
    assert isinstance(failure, DecodeFailure) and failure.request_id is None
