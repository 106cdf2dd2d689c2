"""Prompts for the generative tests: runs of words from license text, which the demo
model (tinylm) was trained on."""

from __future__ import annotations

import random

TEXT = (
    "Permission is hereby granted free of charge to any person obtaining a copy of this "
    "software THE SOFTWARE IS PROVIDED AS IS WITHOUT WARRANTY OF ANY KIND Redistribution "
    "and use in source and binary forms with or without modification are permitted"
)


def prompt(rng: random.Random, min_words: int = 2, max_words: int = 40) -> str:
    words = TEXT.split()
    start = rng.randrange(len(words) - min_words)
    return " ".join(words[start : start + rng.randint(min_words, max_words)])
