"""DeadLetter and RawRecord: original bytes untouched, headers that say why and where."""

from __future__ import annotations

from wire_factories import raw

from consumers.contract import DeadLetterHeaders
from consumers.errors import BadRecord, PayloadTooLarge
from consumers.records import DeadLetter, SourceRef


def test_a_dead_letter_keeps_the_original_bytes_and_says_why_and_where() -> None:
    value = b"\xff\x00 not json at all"
    record = raw(value, key=b"\x01key", topic="inferlane.requests.high", partition=4, offset=991)

    letter = DeadLetter.of(record, BadRecord("value is not UTF-8 JSON"))

    assert letter.value is value and letter.key == b"\x01key"
    assert letter.source == SourceRef("inferlane.requests.high", 4, 991)
    assert letter.headers() == [
        (DeadLetterHeaders.CODE, b"bad_record"),
        (DeadLetterHeaders.MESSAGE, b"value is not UTF-8 JSON"),
        (DeadLetterHeaders.TOPIC, b"inferlane.requests.high"),
        (DeadLetterHeaders.PARTITION, b"4"),
        (DeadLetterHeaders.OFFSET, b"991"),
    ]


def test_header_names_are_the_documented_ones() -> None:
    letter = DeadLetter.of(raw(b"x"), PayloadTooLarge("big"))
    names = [name for name, _ in letter.headers()]
    assert names == [
        "error.code",
        "error.message",
        "source.topic",
        "source.partition",
        "source.offset",
    ]
    assert all(isinstance(v, bytes) for _, v in letter.headers())


def test_a_tombstone_dead_letter_keeps_no_value_and_no_key() -> None:
    letter = DeadLetter.of(raw(None, key=None), BadRecord("tombstone"))
    assert letter.value is None and letter.key is None
    assert dict(letter.headers())[DeadLetterHeaders.CODE] == b"bad_record"


def test_a_long_message_is_bounded_in_the_header_but_kept_on_the_letter() -> None:
    message = "é" * 5000
    letter = DeadLetter.of(raw(b"x"), BadRecord(message))
    header = dict(letter.headers())[DeadLetterHeaders.MESSAGE]
    assert header.decode() == "é" * 1024
    assert letter.message == message


def test_a_raw_record_repr_shows_the_size_not_the_payload() -> None:
    record = raw(b'{"secret": "hunter2"}', key=b"k")
    assert "hunter2" not in repr(record)
    assert "value_bytes=21" in repr(record)
    assert "value_bytes=-1" in repr(raw(None))
