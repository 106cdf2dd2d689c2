"""Which version answers a request: a stable hash of its id against the canary share.

The hash depends on the model and the request id only, never on the partition or the
worker, so every worker sends a request (and its replays) to the same version, and a
request on the canary at 5% stays on it at 25%.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from consumers.errors import UnknownModel

_SCALE = float(2**64)


def bucket(model: str, request_id: str) -> float:
    """A uniform point in [0, 1) for this request of this model."""
    digest = hashlib.blake2b(
        request_id.encode(), digest_size=8, person=b"inferlane-route", key=model.encode()[:64]
    ).digest()
    return int.from_bytes(digest, "big") / _SCALE


@dataclass(frozen=True, slots=True)
class Route:
    """Where one model's requests go while its rollout lasts."""

    rollout_id: int
    candidate: str  # the candidate's registry key (name@version)
    share: float  # fraction of requests the candidate answers (0 in shadow mode)


class Router:
    """Thread-safe: admission threads read the routes, the rollout task replaces them."""

    def __init__(self) -> None:
        self._routes: Mapping[str, Route] = {}

    def update(self, routes: Mapping[str, Route]) -> None:
        self._routes = dict(routes)  # replaced whole: readers never see half an update

    def route(self, model: str, request_id: str) -> str:
        """The registry key of the version that answers this request."""
        if "@" in model:  # a candidate key is internal, never a request's model name
            raise UnknownModel(f"unknown model {model!r:.80}: model names contain no '@'")
        route = self._routes.get(model)
        if route is None or route.share <= 0.0:
            return model
        if route.share >= 1.0 or bucket(model, request_id) < route.share:
            return route.candidate
        return model
