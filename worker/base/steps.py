"""Shutdown steps that end in bounded time, whatever the database, broker or a model does."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable

log = logging.getLogger(__name__)

# Each shutdown step gets at least this long, even when draining used up the timeout.
STEP_GRACE_S = 1.0


async def bounded(deadline: float, what: str, step: Awaitable[object]) -> None:
    """Await ``step`` until ``deadline`` (at least ``STEP_GRACE_S``); log if it overran."""
    timeout = max(STEP_GRACE_S, deadline - time.monotonic())
    try:
        await asyncio.wait_for(step, timeout)
    except TimeoutError:
        log.warning("%s did not finish within %.1fs; going on without it", what, timeout)


async def cancelled(tasks: list[asyncio.Task[None]], deadline: float) -> None:
    """Cancel ``tasks`` and wait until they end. A cancellation can be lost (a timeout
    inside a stage expiring at the same moment turns it into a TimeoutError, which the
    stage retries), so a task still running after a grace period is cancelled again;
    past the deadline the rest are left behind, logged."""
    pending = set(tasks)
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=STEP_GRACE_S)
        if pending and time.monotonic() > deadline:
            names = ", ".join(sorted(t.get_name() for t in pending))
            log.warning("stages still running after cancellation: %s; going on", names)
            break
    for task in tasks:  # retrieve their ends, so none is reported as never retrieved
        if task.done() and not task.cancelled():
            task.exception()
