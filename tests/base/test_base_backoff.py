"""Retry with backoff: doubling delays up to a cap, failures remembered until due, and a
step awaited again after each retriable error only."""

from __future__ import annotations

import logging

import pytest

from worker.base.backoff import Backoff, Failure, until_done


def test_delays_double_up_to_the_cap() -> None:
    backoff = Backoff(first_s=0.5, max_s=3.0)
    assert [backoff.delay_s(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_a_failure_counts_attempts_and_says_when_it_is_tried_again() -> None:
    backoff = Backoff(first_s=60.0, max_s=600.0)
    first = Failure.after(None, "model 'digits' is unavailable", OSError("disk"), backoff)
    again = Failure.after(first, "model 'digits' is unavailable", OSError("disk"), backoff)
    assert first.attempts == 1 and again.attempts == 2
    assert again.message == (
        "model 'digits' is unavailable: OSError: disk (attempt 2; next retry in 120 s)"
    )
    assert not again.due and 119 < again.delay_s <= 120
    assert Failure.after(None, "x", OSError(), Backoff(0.0, 0.0)).due


async def test_a_step_is_retried_after_retriable_errors_only() -> None:
    calls: list[int] = []

    async def flaky() -> str:
        calls.append(len(calls))
        if len(calls) < 3:
            raise TimeoutError("not yet")
        return "done"

    backoff = Backoff(first_s=0.001, max_s=0.002)
    log = logging.getLogger("test")
    assert await until_done("flaky", flaky, backoff, (TimeoutError,), log) == "done"
    assert len(calls) == 3

    async def broken() -> str:
        raise ValueError("a bug, not an outage")

    with pytest.raises(ValueError):
        await until_done("broken", broken, backoff, (TimeoutError,), log)
