"""How close a generated text is to the expected one: exact match and token-level F1.

Tokens are the whitespace-separated words, lowercased (SQuAD's F1 without its
punctuation and article stripping): F1 is the harmonic mean of the precision and
recall of the generated words against the expected ones, counted with multiplicity.
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple


class TextScore(NamedTuple):
    exact: bool
    f1: float


def score(text: str, expected: str) -> TextScore:
    got, want = text.lower().split(), expected.lower().split()
    exact = text.strip() == expected.strip()
    if not got or not want:
        return TextScore(exact, float(got == want))
    common = sum((Counter(got) & Counter(want)).values())
    if common == 0:
        return TextScore(exact, 0.0)
    precision, recall = common / len(got), common / len(want)
    return TextScore(exact, 2 * precision * recall / (precision + recall))
