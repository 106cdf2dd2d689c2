"""The urgent-first ready queue on a real asyncio loop: urgent callbacks run before the
ordinary ones queued earlier, in order among themselves, inherited by what urgent code
schedules, switchable per task, and never starving ordinary work."""

from __future__ import annotations

import asyncio
import collections
import contextvars
from pathlib import Path
from typing import Any

import pytest

from consumers.client import InferlaneClient
from consumers.contract import Status
from worker.base.urgent_loop import (
    FAIR_AFTER,
    UrgentFirst,
    boost_current,
    install,
    is_urgent,
    urgent_context,
)
from worker.demo.workload import digits_requests
from worker.facade import Worker
from worker.intake.broker import EmbeddedBroker
from worker.models import ModelRegistry
from worker.settings import WorkerSettings


async def _drain() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_urgent_callbacks_run_before_ordinary_ones_queued_earlier() -> None:
    loop = asyncio.get_running_loop()
    assert install(loop)
    ran: list[str] = []
    for i in range(3):
        loop.call_soon(ran.append, f"bulk{i}")
    for i in range(2):
        loop.call_soon(ran.append, f"urgent{i}", context=urgent_context())
    await _drain()
    assert ran == ["urgent0", "urgent1", "bulk0", "bulk1", "bulk2"]


def test_without_the_queue_a_loop_runs_first_in_first_out() -> None:
    loop = asyncio.new_event_loop()  # the control: nothing installed
    ran: list[str] = []
    try:
        loop.call_soon(ran.append, "bulk")
        loop.call_soon(ran.append, "urgent", context=urgent_context())
        loop.run_until_complete(_drain())
    finally:
        loop.close()
    assert ran == ["bulk", "urgent"]


async def test_a_child_task_of_an_urgent_task_overtakes_bulk_callbacks() -> None:
    loop = asyncio.get_running_loop()
    install(loop)
    ran: list[str] = []

    async def child() -> None:
        ran.append(f"child urgent={is_urgent()}")

    async def urgent_parent() -> None:
        for i in range(3):  # in an ordinary context, queued before the child's first step
            loop.call_soon(ran.append, f"bulk{i}", context=contextvars.Context())
        await asyncio.create_task(child())

    await asyncio.create_task(urgent_parent(), context=urgent_context())
    await _drain()
    assert ran == ["child urgent=True", "bulk0", "bulk1", "bulk2"]
    assert not is_urgent()


async def test_a_boost_makes_a_task_urgent_only_while_it_is_on() -> None:
    loop = asyncio.get_running_loop()
    install(loop)
    ran: list[str] = []
    step = asyncio.Event()
    boost_ready = asyncio.Event()
    boosts: list[Any] = []

    async def boosted() -> None:
        boosts.append(boost_current())
        boost_ready.set()
        for i in range(2):
            await step.wait()
            step.clear()
            ran.append(f"task{i}")

    task = asyncio.create_task(boosted())
    await boost_ready.wait()
    boost = boosts[0]
    for on in (False, True):
        boost.on = on
        loop.call_soon(ran.append, f"bulk-{on}")
        step.set()  # the task's wake-up is queued after the bulk callback
        await _drain()
    await task
    assert ran == ["bulk-False", "task0", "task1", "bulk-True"]


def test_ordinary_work_runs_at_least_once_per_fair_after_urgent_callbacks() -> None:
    ready = UrgentFirst(collections.deque())
    loop = asyncio.new_event_loop()
    try:
        urgent = urgent_context()
        handles = [asyncio.Handle(print, (), loop, urgent) for _ in range(3 * FAIR_AFTER)]
        for h in handles:
            ready.append(h)
        bulk = [asyncio.Handle(print, (), loop, None) for _ in range(2)]
        for h in bulk:
            ready.append(h)
        assert len(ready) == 3 * FAIR_AFTER + 2
        order = [ready.popleft() for _ in range(len(ready))]
    finally:
        loop.close()
    assert order.index(bulk[0]) == FAIR_AFTER
    assert order.index(bulk[1]) == 2 * FAIR_AFTER + 1
    assert [h for h in order if h not in bulk] == handles  # in order among themselves
    assert not ready


def test_install_leaves_a_loop_with_a_ready_queue_of_another_kind_alone() -> None:
    class Foreign(asyncio.AbstractEventLoop):
        def __init__(self) -> None:
            self._ready: list[Any] = []

    foreign = Foreign()
    assert not install(foreign)
    assert foreign._ready == []
    loop = asyncio.new_event_loop()
    try:
        assert install(loop) and install(loop)  # twice: the same queue
        assert isinstance(loop._ready, UrgentFirst)  # type: ignore[attr-defined]
    finally:
        loop.close()


@pytest.mark.parametrize("urgent", [False, True])
async def test_is_urgent_says_what_context_the_code_runs_in(urgent: bool) -> None:
    async def probe() -> bool:
        return is_urgent()

    context = urgent_context() if urgent else None
    assert await asyncio.create_task(probe(), context=context) is urgent


class _Recorded(collections.deque[Any]):
    """The urgent queue of a running worker's loop, keeping what passed through it."""

    def __init__(self, queued: collections.deque[Any]) -> None:
        super().__init__(queued)
        self.seen: list[Any] = []

    def append(self, handle: Any) -> None:
        self.seen.append(handle._callback)
        super().append(handle)


def _owner(callback: Any) -> str:
    """The task a task wake-up belongs to, else the callback's name."""
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        return owner.get_name()
    return getattr(callback, "__qualname__", type(callback).__name__)


async def test_in_a_worker_a_high_request_s_hops_are_urgent_and_bulk_ones_are_not(
    broker: EmbeddedBroker, tmp_path: Path, demo_registry: ModelRegistry
) -> None:
    settings = WorkerSettings(bootstrap=broker.bootstrap, database_url=f"sqlite:///{tmp_path}/u.db")
    async with Worker(settings, demo_registry):
        ready = asyncio.get_running_loop()._ready  # type: ignore[attr-defined]
        assert isinstance(ready, UrgentFirst)
        recorded = ready._urgent = _Recorded(ready._urgent)  # with what it holds now
        with InferlaneClient(broker.bootstrap) as client:
            await asyncio.to_thread(client.watch_results)
            low = client.publish(digits_requests(200, prefix="bulk"), topic=settings.topics.low)
            await asyncio.to_thread(client.results, low, timeout_s=60)
            bulk_only = {_owner(c) for c in recorded.seen}
            high = client.publish(digits_requests(1, prefix="urgent"), topic=settings.topics.high)
            got = await asyncio.to_thread(client.results, high, timeout_s=60)
    assert got[high[0]].status == Status.OK
    urgent = {_owner(c) for c in recorded.seen}
    # The urgent reader polls all along; the high request adds its batch's end and
    # the wake-ups of the urgent publish stream.
    assert "inferlane-intake-urgent" in bulk_only
    assert "Dispatch._done" not in bulk_only and "Dispatch._done" in urgent
    assert "inferlane-publish-urgent" in urgent - bulk_only
    assert not {"inferlane-intake", "inferlane-publish", "inferlane-persist"} & urgent
