"""A request's generated text, token by token: incremental decoding, stop strings, and
chunk boundaries that depend on the tokens alone.

The text is the concatenation of the deltas ``tokenizers``' ``DecodeStream`` yields
(it holds back bytes that do not yet form a character), cut before the first stop
string. Chunks cover the text up to the first token, then every ``chunk_tokens``
tokens, then the rest at the end; text that could still turn into a stop string is
held back until it cannot. So a replayed request (the same tokens) produces the same
chunks with the same sequence numbers: a consumer deduplicates by (request id, seq).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream

# Prompt tokens the decoder sees first: a first generated token decodes as it would
# after them (a leading space, a byte sequence that began in the prompt).
_CONTEXT_TOKENS = 4


@dataclass(frozen=True, slots=True)
class Chunk:
    seq: int
    text: str
    tokens: int  # generated tokens covered so far


class TextStream:
    def __init__(
        self,
        tokenizer: Tokenizer,
        prompt_ids: Sequence[int],
        *,
        stop: Sequence[str] = (),
        chunk_tokens: int = 8,
    ) -> None:
        self._tokenizer = tokenizer
        self._decoder = DecodeStream(list(prompt_ids[-_CONTEXT_TOKENS:]), skip_special_tokens=True)
        self._stop = tuple(s for s in stop if s)
        self._chunk_tokens = chunk_tokens
        self._text = ""
        self._sent = 0  # characters of _text already in chunks
        self._seq = 0
        self.tokens = 0
        self.stopped = False

    @property
    def text(self) -> str:
        return self._text

    def push(self, token_ids: Sequence[int]) -> list[Chunk]:
        """Feed newly generated tokens; returns the chunks they complete. After a stop
        string is found, later tokens are ignored."""
        chunks = []
        for token in token_ids:
            if self.stopped:
                break
            self.tokens += 1
            delta = self._decoder.step(self._tokenizer, token)
            if delta:
                self._append(delta)
            if self.stopped or self._boundary():
                chunks.append(self._chunk(final=self.stopped))
        return chunks

    def finish(self) -> Chunk | None:
        """The last chunk: the rest of the text, when some is unsent."""
        if self._sent < len(self._text):
            return self._chunk(final=True)
        return None

    def _boundary(self) -> bool:
        return self.tokens == 1 or (self.tokens - 1) % self._chunk_tokens == 0

    def _append(self, delta: str) -> None:
        start = max(0, len(self._text) - max((len(s) for s in self._stop), default=0))
        self._text += delta
        cuts = [i for s in self._stop if (i := self._text.find(s, start)) >= 0]
        if cuts:
            self._text = self._text[: min(cuts)]
            self.stopped = True

    def _held_back(self) -> int:
        """Characters at the end that are the start of some stop string."""
        held = 0
        for s in self._stop:
            for n in range(min(len(s) - 1, len(self._text)), held, -1):
                if self._text.endswith(s[:n]):
                    held = n
                    break
        return held

    def _chunk(self, *, final: bool) -> Chunk:
        end = len(self._text) if final else max(self._sent, len(self._text) - self._held_back())
        chunk = Chunk(self._seq, self._text[self._sent : end], self.tokens)
        self._sent = end
        self._seq += 1
        return chunk
