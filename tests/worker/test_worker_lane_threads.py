"""CPU lane threads: each lane's batches run on a thread of their own, the lower lanes'
at their nice values, so a high batch finishes while a long low batch still runs."""

from __future__ import annotations

import os
import threading

import pytest
import torch
from pipeline_factories import classifier, pending

from consumers.contract import Priority
from worker.base.pending import Batch
from worker.execution.executor import ThreadExecutor
from worker.models import LoadedModel

HIGH, NORMAL, LOW = Priority.HIGH, Priority.NORMAL, Priority.LOW
NICE = {HIGH: 0, NORMAL: 3, LOW: 11}
BLOCK = 9.0  # an input holding this blocks its batch until released


class Observed(torch.nn.Module):
    """A linear classifier that records each call's thread nice value and torch thread
    count, and blocks on ``BLOCK`` (counted in ``blocked``) until ``release`` is set."""

    def __init__(self, release: threading.Event) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)
        self.release = release
        self.nice: dict[float, int] = {}  # by the first input value
        self.threads: dict[float, int] = {}
        self.blocked = threading.Semaphore(0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.nice[float(x[0, 0])] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        self.threads[float(x[0, 0])] = torch.get_num_threads()
        if bool((x == BLOCK).any()):
            self.blocked.release()
            self.release.wait(30)
        return self.linear(x)


def batch(lane: Priority, value: float) -> Batch:
    return Batch("m", [pending(lane=lane, inputs=[value, 0.0, 0.0, 0.0])], 0.0, lane=lane)


def test_a_high_batch_finishes_while_a_long_low_batch_runs() -> None:
    release = threading.Event()
    module = Observed(release)
    model = LoadedModel("m", "v1", module, classifier(), 64, torch.device("cpu"))
    executor = ThreadExecutor(lambda _: model, nice=NICE)
    assert executor.lanes_apart and executor.preempts
    try:
        low = executor.submit(batch(LOW, BLOCK))
        high = executor.submit(batch(HIGH, 1.0))
        assert high.result(timeout=10).results[0].outputs is not None
        assert not low.done()  # still blocked on its own thread
        release.set()
        assert low.result(timeout=10).results[0].outputs is not None
        normal = executor.submit(batch(NORMAL, 2.0)).result(timeout=10)
        assert normal.results[0].outputs is not None
    finally:
        release.set()
        executor.shutdown()
    base = os.getpriority(os.PRIO_PROCESS, 0)  # each lane's thread adds its own nice
    assert module.nice == {BLOCK: min(19, base + 11), 1.0: base, 2.0: min(19, base + 3)}


def test_one_thread_serves_every_lane_when_lane_threads_are_off() -> None:
    release = threading.Event()
    model = LoadedModel("m", "v1", Observed(release), classifier(), 64, torch.device("cpu"))
    executor = ThreadExecutor(lambda _: model)
    assert not executor.lanes_apart and not executor.preempts
    try:
        low = executor.submit(batch(LOW, BLOCK))
        high = executor.submit(batch(HIGH, 1.0))
        assert not high.done() and not low.done()  # behind the blocked batch, same thread
        release.set()
        assert high.result(timeout=10).results[0].outputs is not None
        assert low.result(timeout=10).results[0].outputs is not None
    finally:
        release.set()
        executor.shutdown()


def test_lower_lanes_run_replicas_side_by_side_on_a_share_of_the_threads() -> None:
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    release = threading.Event()
    module = Observed(release)
    model = LoadedModel("m", "v1", module, classifier(), 64, torch.device("cpu"))
    one = LoadedModel("one", "v1", module, classifier(), 64, torch.device("cpu"))
    models = {"m": model, "one": one}
    executor = ThreadExecutor(
        models.__getitem__,
        nice=NICE,
        replicas=2,
        replicas_for=lambda name: 1 if name == "one" else 2,
    )
    assert [executor.slots(lane) for lane in (HIGH, NORMAL, LOW)] == [1, 2, 2]
    try:
        first = executor.submit(batch(LOW, BLOCK))
        second = executor.submit(Batch("m", [pending(lane=LOW, inputs=[BLOCK, 1.0, 0, 0])], 0.0))
        # Both block at once: each runs on a replica of its own.
        assert module.blocked.acquire(timeout=10) and module.blocked.acquire(timeout=10)
        high = executor.submit(batch(HIGH, 1.0)).result(timeout=10)
        assert high.results[0].outputs is not None
        release.set()
        assert first.result(timeout=10).results[0].outputs is not None
        assert second.result(timeout=10).results[0].outputs is not None
        # A model held to one replica queues behind its own batch on the first thread.
        release.clear()
        held = executor.submit(Batch("one", [pending(lane=NORMAL, inputs=[BLOCK, 2, 0, 0])], 0.0))
        assert module.blocked.acquire(timeout=10)
        queued = executor.submit(Batch("one", [pending(lane=NORMAL, inputs=[3.0, 0, 0, 0])], 0.0))
        with pytest.raises(TimeoutError):
            queued.result(timeout=0.5)
        release.set()
        assert queued.result(timeout=10).results[0].outputs is not None
        assert held.result(timeout=10).results[0].outputs is not None
        # Threads that start torch work later still take the process's count.
        later: list[int] = []
        fresh = threading.Thread(target=lambda: later.append(torch.get_num_threads()))
        fresh.start()
        fresh.join()
        assert later == [2]
    finally:
        release.set()
        executor.shutdown()
        torch.set_num_threads(before)
    assert module.threads[1.0] == 2  # the high lane keeps every torch thread
    assert module.threads[BLOCK] == 1 and module.threads[3.0] == 1
