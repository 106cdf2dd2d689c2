"""Labelled request workloads from the demo data sets (demo, tests and benchmarks)."""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from consumers.contract import InferenceRequest, Priority
from worker.demo.models import demo_sentences, diabetes_test_set, digits_test_set
from worker.settings import TopicConfig


@dataclass(frozen=True, slots=True)
class Labelled:
    topic: str
    request: InferenceRequest

    @property
    def value(self) -> bytes:
        return self.request.model_dump_json(exclude_none=True).encode()

    @property
    def key(self) -> bytes:
        return self.request.request_id.encode()


# Pixel intensities of the digits set run from 0 to 16.
_DIGITS_MAX = 16.0


def digits_requests(
    n: int, *, prefix: str = "digits", inverted: bool = False
) -> list[InferenceRequest]:
    """``inverted``: a shifted stream (white on black), the labels still the true digits."""
    x, y = digits_test_set()
    return _labelled("digits", _DIGITS_MAX - x if inverted else x, [int(v) for v in y], n, prefix)


def diabetes_requests(
    n: int, *, prefix: str = "diabetes", scale: float = 1.0
) -> list[InferenceRequest]:
    """``scale`` != 1: a shifted stream (features rescaled, as by a unit change upstream)."""
    x, y = diabetes_test_set()
    return _labelled("diabetes", x * scale, [float(v) for v in y], n, prefix)


def _labelled(
    model: str, x: np.ndarray, labels: list[int] | list[float], n: int, prefix: str
) -> list[InferenceRequest]:
    """``n`` requests cycling through a test set, each carrying its ground truth."""
    return [
        InferenceRequest(
            request_id=f"{prefix}-{i}",
            model=model,
            inputs=x[i % len(x)].tolist(),
            expected=labels[i % len(labels)],
        )
        for i in range(n)
    ]


def minilm_requests(n: int, *, prefix: str = "minilm", seed: int = 7) -> list[InferenceRequest]:
    return [
        InferenceRequest(request_id=f"{prefix}-{i}", model="minilm", inputs=text)
        for i, text in enumerate(demo_sentences(n, seed))
    ]


# Openings of the license texts the generative demo model (tinylm) was trained on.
PROMPTS = (
    "Permission is hereby granted",
    "THE SOFTWARE IS PROVIDED",
    "Redistribution and use in source and binary forms",
    "Licensed under the Apache License",
)


def tinylm_requests(
    n: int, *, prefix: str = "tinylm", max_new_tokens: int = 40
) -> list[InferenceRequest]:
    """``n`` greedy prompts for the generative demo model, cycling through ``PROMPTS``."""
    return [
        InferenceRequest(
            request_id=f"{prefix}-{i}",
            model="tinylm",
            inputs={"prompt": PROMPTS[i % len(PROMPTS)], "max_new_tokens": max_new_tokens},
        )
        for i in range(n)
    ]


# Share of traffic per lane in the mixed workload: mostly normal, some bulk, a few urgent.
LANES = (Priority.HIGH, Priority.NORMAL, Priority.LOW)
LANE_WEIGHTS = (0.1, 0.7, 0.2)


def spread_over_lanes(
    requests: list[InferenceRequest], topics: TopicConfig, *, seed: int = 1
) -> list[Labelled]:
    """Each request to a lane topic drawn by ``LANE_WEIGHTS``, then shuffled together."""
    rng = random.Random(seed)
    by_lane = {p: t for t, p in topics.lane_topics().items()}
    out = [Labelled(by_lane[rng.choices(LANES, LANE_WEIGHTS)[0]], r) for r in requests]
    rng.shuffle(out)
    return out
