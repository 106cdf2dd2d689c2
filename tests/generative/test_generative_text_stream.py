"""Streamed text: chunks in order that concatenate to the text, cut at stop strings,
and the same chunks for the same tokens."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer

from worker.execution.generative.text_stream import Chunk, TextStream


@pytest.fixture(scope="module")
def tokenizer(tinylm_registry_path: Path) -> Tokenizer:
    return Tokenizer.from_file(str(tinylm_registry_path.parent / "tinylm-1" / "tokenizer.json"))


def _run(tokenizer: Tokenizer, text: str, **kwargs: object) -> tuple[TextStream, list[Chunk]]:
    ids = tokenizer.encode(text).ids
    stream = TextStream(tokenizer, [], **kwargs)  # type: ignore[arg-type]
    chunks = []
    for token in ids:  # one token per step, as the engine hands them out
        chunks += stream.push([token])
    last = stream.finish()
    return stream, chunks + ([last] if last else [])


def test_chunks_concatenate_to_the_text_in_seq_order(tokenizer: Tokenizer) -> None:
    text = "Permission is hereby granted, free of charge, to any person — naïve café 日本 ✓."
    stream, chunks = _run(tokenizer, text, chunk_tokens=4)
    assert stream.text == text
    assert "".join(c.text for c in chunks) == text
    assert [c.seq for c in chunks] == list(range(len(chunks)))
    assert chunks[0].tokens == 1 and all(c.tokens == 1 + 4 * i for i, c in enumerate(chunks[:-1]))


def test_the_same_tokens_give_the_same_chunks(tokenizer: Tokenizer) -> None:
    first = _run(tokenizer, "THE SOFTWARE IS PROVIDED AS IS, WITHOUT WARRANTY", chunk_tokens=3)[1]
    again = _run(tokenizer, "THE SOFTWARE IS PROVIDED AS IS, WITHOUT WARRANTY", chunk_tokens=3)[1]
    assert first == again


def test_a_stop_string_ends_the_text_before_it(tokenizer: Tokenizer) -> None:
    stream, chunks = _run(tokenizer, "one two. three four.", stop=[". t"], chunk_tokens=1)
    assert stream.stopped and stream.text == "one two"
    assert "".join(c.text for c in chunks) == "one two"
    assert stream.tokens < len(tokenizer.encode("one two. three four.").ids)


def test_text_that_may_start_a_stop_string_waits(tokenizer: Tokenizer) -> None:
    stream = TextStream(tokenizer, [], stop=["END"], chunk_tokens=1)
    sent = [c.text for t in tokenizer.encode("ab EN").ids for c in stream.push([t])]
    assert "".join(sent) == "ab " and not stream.stopped
    last = stream.finish()
    assert last is not None and "".join(sent) + last.text == "ab EN"
