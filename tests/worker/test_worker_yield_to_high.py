"""The backends yield to high requests in the worker: a lower lane's next batch waits
for them until their batch has computed (CPU lane threads, CUDA launchers), a high batch
never does."""

from __future__ import annotations

import threading

import pytest
import torch
from pipeline_factories import classifier, pending

from consumers.contract import Priority
from worker.base.pending import Batch
from worker.execution.cuda_lanes import CudaLaneExecutor
from worker.execution.executor import Executor, ThreadExecutor
from worker.models import LoadedModel
from worker.scheduling.yield_to_high import YieldToHigh

HIGH, LOW = Priority.HIGH, Priority.LOW
NICE = {HIGH: 0, Priority.NORMAL: 0, LOW: 10}


class Watched(YieldToHigh):
    """A gate that never times out (its clock stands still) and says when a bulk thread
    waits on it."""

    def __init__(self) -> None:
        super().__init__(0.5, clock=lambda: 0.0)
        self.waiting = threading.Event()

    def hold(self) -> None:
        if self.remaining_s(compute=True) > 0:
            self.waiting.set()
        super().hold()


def model(device: str = "cpu") -> LoadedModel:
    module = torch.nn.Linear(4, 3).to(device)
    return LoadedModel("m", "v1", module, classifier(), 64, torch.device(device))


def batch(lane: Priority) -> Batch:
    return Batch("m", [pending(lane=lane, inputs=[1.0, 2.0, 3.0, 4.0])], 0.0, lane=lane)


def assert_low_waits_for_the_high_request(executor: Executor, gate: Watched) -> None:
    gate.arrived(1, computing=1)  # a high request is in the worker, bound for a batch
    low = executor.submit(batch(LOW))
    assert gate.waiting.wait(10)  # the low lane's thread waits before its batch
    assert not low.done()
    high = executor.submit(batch(HIGH)).result(timeout=10)
    assert high.results[0].outputs is not None
    # Computed, its result not yet on Kafka: the low batch goes, bulk publishing still waits.
    assert low.result(timeout=10).results[0].outputs is not None
    assert gate.remaining_s() > 0
    gate.left(1)
    assert gate.remaining_s() == 0


def test_a_lower_lane_thread_waits_while_a_high_request_is_in_the_worker() -> None:
    gate = Watched()
    executor = ThreadExecutor(lambda _: model(), nice=NICE, yield_to_high=gate)
    try:
        assert_low_waits_for_the_high_request(executor, gate)
    finally:
        gate.left(1)
        executor.shutdown()


def test_one_compute_thread_for_every_lane_never_waits() -> None:
    """A waiting low batch would hold the high batch queued behind it on the one thread."""
    gate = Watched()
    executor = ThreadExecutor(lambda _: model(), yield_to_high=gate)
    try:
        gate.arrived(1, computing=1)
        assert executor.submit(batch(LOW)).result(timeout=10).results[0].outputs is not None
        assert not gate.waiting.is_set()
    finally:
        executor.shutdown()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_lower_lane_launcher_waits_before_its_permit_while_a_high_request_is_in() -> None:
    gate = Watched()
    executor = CudaLaneExecutor(lambda _: model("cuda"), torch.device("cuda"), yield_to_high=gate)
    try:
        assert_low_waits_for_the_high_request(executor, gate)
        assert executor.cap.held == 0
    finally:
        gate.left(1)
        executor.shutdown()
