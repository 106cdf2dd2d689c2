"""Canary routing: a stable hash of the request id against the share."""

from __future__ import annotations

import pytest

from consumers.errors import UnknownModel
from worker.rollout.routing import Route, Router, bucket

IDS = [f"req-{i}" for i in range(10_000)]


@pytest.mark.parametrize("share", [0.01, 0.05, 0.25, 0.5])
def test_the_canary_share_holds_within_one_point_over_10k_requests(share: float) -> None:
    router = Router()
    router.update({"digits": Route(1, "digits@2", share)})
    on_candidate = sum(router.route("digits", rid) == "digits@2" for rid in IDS)
    assert abs(on_candidate / len(IDS) - share) <= 0.01


def test_a_request_lands_on_the_same_version_every_time_and_stays_as_the_share_grows() -> None:
    first, second = Router(), Router()  # two workers
    for router in (first, second):
        router.update({"digits": Route(1, "digits@2", 0.05)})
    at_5 = {rid for rid in IDS if first.route("digits", rid) == "digits@2"}
    assert at_5 == {rid for rid in IDS if second.route("digits", rid) == "digits@2"}
    first.update({"digits": Route(1, "digits@2", 0.25)})
    at_25 = {rid for rid in IDS if first.route("digits", rid) == "digits@2"}
    assert at_5 < at_25


def test_models_hash_independently_and_other_models_are_untouched() -> None:
    router = Router()
    router.update({"digits": Route(1, "digits@2", 0.5)})
    assert all(router.route("diabetes", rid) == "diabetes" for rid in IDS[:100])
    digits = [bucket("digits", rid) < 0.5 for rid in IDS]
    diabetes = [bucket("diabetes", rid) < 0.5 for rid in IDS]
    agree = sum(a == b for a, b in zip(digits, diabetes, strict=True)) / len(IDS)
    assert 0.45 < agree < 0.55  # independent: agreement by chance only


def test_share_zero_and_one_and_candidate_keys() -> None:
    router = Router()
    router.update({"digits": Route(1, "digits@2", 0.0), "diabetes": Route(2, "diabetes@3", 1.0)})
    assert {router.route("digits", rid) for rid in IDS[:500]} == {"digits"}
    assert {router.route("diabetes", rid) for rid in IDS[:500]} == {"diabetes@3"}
    with pytest.raises(UnknownModel, match="no '@'"):
        router.route("digits@2", "x")  # a request cannot name a candidate
