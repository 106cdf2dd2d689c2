"""The CUDA backend's device-independent parts, on the CPU: lane priorities, the cap on
lower-lane batches, staging buffers, a batch's lane, the backend's choice, and that
bisection runs through the backend's own forward pass."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest
import torch
from pipeline_factories import classifier, pending
from prometheus_client import CollectorRegistry
from pydantic import JsonValue

from consumers.contract import Priority
from worker.base.pending import Batch
from worker.execution.choose import choose_executor
from worker.execution.cuda_lanes import InFlightCap, lane_priorities
from worker.execution.executor import ThreadExecutor, run_batch
from worker.execution.host_buffers import HostBuffers
from worker.models import LoadedModel, ModelRegistry
from worker.scheduling.lanes import lane_of
from worker.settings import ComputeConfig

HIGH, NORMAL, LOW = Priority.HIGH, Priority.NORMAL, Priority.LOW


# -- lane priorities -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("priority_range", "expected"),
    [
        ((0, -5), {HIGH: -5, NORMAL: -2, LOW: 0}),
        ((0, -3), {HIGH: -3, NORMAL: -1, LOW: 0}),
        ((-3, 0), {HIGH: -3, NORMAL: -1, LOW: 0}),  # either order
        ((0, -2), {HIGH: -2, NORMAL: -1, LOW: 0}),
        ((0, -1), {HIGH: -1, NORMAL: 0, LOW: 0}),  # two levels: only high on top
        ((0, 0), {HIGH: 0, NORMAL: 0, LOW: 0}),  # no priorities on this device
    ],
)
def test_lanes_spread_over_the_priority_range_high_lane_lowest_number(
    priority_range: tuple[int, int], expected: dict[Priority, int]
) -> None:
    assert lane_priorities(priority_range) == expected


def test_a_single_lane_gets_the_highest_priority() -> None:
    assert lane_priorities((0, -4), [NORMAL]) == {NORMAL: -4}


# -- the cap on lower-lane batches -----------------------------------------------------


def acquire_in_thread(cap: InFlightCap, holder: str, rank: int, got: list[str]) -> threading.Thread:
    def run() -> None:
        cap.acquire(holder, rank)
        got.append(holder)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def wait_until(condition: Any, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_the_cap_holds_a_waiter_until_a_permit_is_released() -> None:
    cap = InFlightCap(1)
    cap.acquire("normal-1", 1)
    got: list[str] = []
    waiter = acquire_in_thread(cap, "low-1", 2, got)
    time.sleep(0.1)
    assert got == [] and cap.held == 1
    cap.release("normal-1")
    waiter.join(5)
    assert got == ["low-1"] and cap.held == 1


def test_the_more_urgent_waiter_goes_first_whatever_the_arrival_order() -> None:
    cap = InFlightCap(1)
    cap.acquire("high-ish", 0)
    got: list[str] = []
    low = acquire_in_thread(cap, "low", 2, got)
    time.sleep(0.05)
    normal = acquire_in_thread(cap, "normal", 1, got)
    time.sleep(0.05)
    cap.release("high-ish")
    normal.join(5)
    assert got == ["normal"]
    cap.release("normal")
    low.join(5)
    assert got == ["normal", "low"]


def test_a_limit_of_two_admits_two_holders_at_once() -> None:
    cap = InFlightCap(2)
    got: list[str] = []
    for name in ("a", "b", "c"):
        acquire_in_thread(cap, name, 1, got)
    wait_until(lambda: len(got) == 2)
    time.sleep(0.05)
    assert len(got) == 2 and cap.held == 2
    cap.release(got[0])
    wait_until(lambda: len(got) == 3)


def test_a_permit_written_off_and_released_again_frees_one_slot_only() -> None:
    cap = InFlightCap(1)
    cap.acquire("hung", 1)
    cap.release("hung")  # the watchdog writes it off
    cap.acquire("successor", 1)
    cap.release("hung")  # the hung thread returns after all: no effect on the successor
    assert cap.held == 1
    got: list[str] = []
    acquire_in_thread(cap, "next", 1, got)
    time.sleep(0.1)
    assert got == []
    cap.release("successor")
    wait_until(lambda: got == ["next"])


def test_a_cap_below_one_is_refused() -> None:
    with pytest.raises(ValueError):
        InFlightCap(0)


# -- staging buffers -------------------------------------------------------------------


def test_staging_copies_values_shape_and_dtype() -> None:
    buffers = HostBuffers(pin=False)
    batch = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    staged = buffers.stage(batch)
    assert staged.dtype == batch.dtype and staged.shape == batch.shape
    assert torch.equal(staged, batch)
    transposed = torch.arange(6, dtype=torch.int64).reshape(2, 3).t()  # not contiguous
    assert torch.equal(buffers.stage(transposed), transposed)


def test_a_buffer_is_reused_until_a_batch_needs_more_then_grows_by_doubling() -> None:
    buffers = HostBuffers(pin=False)
    first = buffers.stage(torch.ones(8, 4))
    pointer = first.data_ptr()
    for rows in (8, 3, 1, 8):
        assert buffers.stage(torch.ones(rows, 4)).data_ptr() == pointer
    assert len(buffers.held()) == 1
    bigger = buffers.stage(torch.full((9, 4), 2.0))
    assert bigger.data_ptr() != pointer and torch.equal(bigger, torch.full((9, 4), 2.0))
    (held,) = buffers.held()
    assert held.numel() == 2 * 8 * 4 * 4  # doubled: 9 rows fit in 16
    assert buffers.stage(torch.ones(16, 4)).data_ptr() == held.data_ptr()


def test_named_inputs_get_one_buffer_each_and_other_values_pass_through() -> None:
    buffers = HostBuffers(pin=False)
    ids = torch.tensor([[1, 2, 3]])
    mask = torch.tensor([[1, 1, 0]])
    staged = buffers.stage({"input_ids": ids, "attention_mask": mask, "note": "x"})
    assert torch.equal(staged["input_ids"], ids) and torch.equal(staged["attention_mask"], mask)
    assert staged["note"] == "x"
    assert staged["input_ids"].data_ptr() != staged["attention_mask"].data_ptr()
    assert len(buffers.held()) == 2


# -- a batch's lane --------------------------------------------------------------------


def test_a_batch_serves_the_lane_of_its_most_urgent_item() -> None:
    mixed = Batch("m", [pending(lane=LOW), pending(lane=NORMAL), pending(lane=LOW)], 0.0)
    assert lane_of(mixed) == NORMAL
    assert lane_of(Batch("m", [pending(lane=LOW)], 0.0)) == LOW
    assert lane_of(Batch("m", [pending(lane=LOW), pending(lane=HIGH)], 0.0)) == HIGH


# -- the backend's choice --------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the choice without CUDA")
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_without_cuda_the_worker_keeps_the_compute_thread(device: str) -> None:
    registry = ModelRegistry([], device=torch.device(device))
    executor = choose_executor(registry, ComputeConfig(), CollectorRegistry())
    try:
        assert type(executor) is ThreadExecutor
    finally:
        executor.shutdown()


def test_cuda_streams_are_on_by_default_with_one_lower_lane_batch_in_flight() -> None:
    config = ComputeConfig()
    assert config.cuda_streams is True and config.lower_lanes_in_flight == 1


# -- run_batch through a backend's own forward pass ------------------------------------


def test_bisection_runs_through_the_backends_forward_pass() -> None:
    model = LoadedModel("m", "v1", torch.nn.Linear(4, 3), classifier(), 64, torch.device("cpu"))
    calls: list[int] = []

    def run(model: LoadedModel, items: Sequence[Any]) -> list[JsonValue]:
        calls.append(len(items))
        if any(float(item[0]) == 13.0 for item in items):
            raise RuntimeError("poison")
        return model.run(items)

    inputs = [[0.0, 1, 2, 3], [13.0, 0, 0, 0], [1.0, 0, 0, 0], [2.0, 0, 0, 0]]
    batch = Batch("m", [pending(inputs=x) for x in inputs], formed_s=0.0)
    results = run_batch(lambda name: model, batch, run).results
    assert [r.error is not None for r in results] == [False, True, False, False]
    assert calls == [4, 2, 1, 1, 2]  # whole, halves, the poisoned half's singles
