"""Retry with backoff: delays that double up to a cap, a failure remembered until its
next try is due, and a step awaited again until it succeeds."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Backoff:
    first_s: float
    max_s: float

    def delay_s(self, attempts: int) -> float:
        """Wait before retry number ``attempts`` (1, 2, ...): doubling, capped."""
        return min(self.max_s, self.first_s * 2 ** (attempts - 1))


@dataclass(frozen=True, slots=True)
class Failure:
    """What failed, how many times in a row, and when it may be tried again."""

    message: str
    attempts: int
    retry_at_s: float  # monotonic

    @property
    def due(self) -> bool:
        return time.monotonic() >= self.retry_at_s

    @classmethod
    def after(
        cls, previous: Failure | None, what: str, exc: BaseException, backoff: Backoff
    ) -> Failure:
        """The failure ``exc`` of ``what``, one attempt after ``previous`` (None: the first)."""
        attempts = previous.attempts + 1 if previous else 1
        delay = backoff.delay_s(attempts)
        message = (
            f"{what}: {type(exc).__name__}: {exc} (attempt {attempts}; next retry in {delay:.3g} s)"
        )
        return cls(message, attempts, time.monotonic() + delay)

    @property
    def delay_s(self) -> float:
        return max(0.0, self.retry_at_s - time.monotonic())


async def until_done(
    what: str,
    step: Callable[[], Awaitable[T]],
    backoff: Backoff,
    retriable: tuple[type[BaseException], ...],
    log: logging.Logger,
) -> T:
    """Await ``step()`` until it returns; each ``retriable`` error is logged, then waited
    out for the next delay of ``backoff``. Anything else propagates."""
    attempts = 0
    while True:
        try:
            return await step()
        except retriable as exc:
            attempts += 1
            delay = backoff.delay_s(attempts)
            log.warning("%s unavailable (%s); retrying in %.1fs", what, exc, delay)
            await asyncio.sleep(delay)
