"""Request payloads for the benchmarks, encoded straight to bytes.

Built from ``worker.demo.workload`` templates, then re-keyed, so that 200,000 requests
cost a few hundred milliseconds and no pydantic objects are held for each.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from functools import cache
from typing import Any

import orjson

from worker.demo.workload import digits_requests, minilm_requests

Record = tuple[bytes, bytes]  # (key, value)


@cache
def _templates(model: str) -> tuple[dict[str, Any], ...]:
    if model == "digits":
        requests = digits_requests(450)  # the held-out set holds 450 images
    elif model == "minilm":
        requests = minilm_requests(512, seed=7)
    else:
        raise ValueError(f"no benchmark workload for model {model!r}")
    return tuple(r.model_dump(mode="json", exclude_none=True) for r in requests)


def request_dict(model: str, i: int, *, prefix: str) -> dict[str, Any]:
    templates = _templates(model)
    return {**templates[i % len(templates)], "request_id": f"{prefix}-{i}"}


def records(model: str, n: int, *, prefix: str) -> Iterator[Record]:
    """``n`` requests for ``model``, keyed by request id."""
    for i in range(n):
        body = request_dict(model, i, prefix=prefix)
        yield body["request_id"].encode(), orjson.dumps(body)


def timed_record(model: str, i: int, *, prefix: str) -> Record:
    """One request stamped with its send time (wall clock) in ``metadata.sent_at``."""
    body = request_dict(model, i, prefix=prefix)
    body["metadata"] = {"sent_at": time.time()}
    return body["request_id"].encode(), orjson.dumps(body)


def texts(n: int) -> list[str]:
    """The minilm workload's sentences (for the ceiling)."""
    templates = _templates("minilm")
    return [str(templates[i % len(templates)]["inputs"]) for i in range(n)]


def digit_rows(n: int) -> list[list[float]]:
    templates = _templates("digits")
    return [templates[i % len(templates)]["inputs"] for i in range(n)]
