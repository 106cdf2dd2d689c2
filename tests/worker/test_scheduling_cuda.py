"""On a GPU machine: the NVML probe and the lane-stream backend. Skipped without CUDA."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future

import pytest
import torch
from pipeline_factories import classifier, pending

from consumers.contract import Priority
from worker.base.pending import Batch, BatchRun
from worker.execution.cuda_lanes import CudaLaneExecutor
from worker.execution.executor import Executor, ThreadExecutor
from worker.models import LoadedModel
from worker.scheduling.lanes import LANE_ORDER
from worker.scheduling.probes import NvmlProbe, open_probe

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
pytestmark = pytest.mark.cuda  # every test here: -m cuda selects them

HIGH, NORMAL, LOW = Priority.HIGH, Priority.NORMAL, Priority.LOW
POISON = 13.0
SIDE = 8192  # one SIDE x SIDE float32 matmul: ~1.1 TFLOP, tens of ms on an H200


@cuda
def test_the_nvml_probe_sees_the_device_busy_while_kernels_run() -> None:
    probe = open_probe(cuda_index=torch.cuda.current_device(), window_s=1.0, nvml_every_s=0.1)
    try:
        assert isinstance(probe, NvmlProbe)
        a = torch.randn(4096, 4096, device="cuda")
        deadline = time.monotonic() + 30  # a bound on the wait, not a timing assertion
        seen = 0.0
        while seen < 0.5 and time.monotonic() < deadline:
            for _ in range(50):
                a = (a @ a).tanh()
            torch.cuda.synchronize()
            seen = max(seen, probe.utilization(time.monotonic()) or 0.0)
        assert 0.5 <= seen <= 1.0
    finally:
        probe.close()


class Poisonable(torch.nn.Module):
    """A fixed linear classifier that raises when any input holds ``POISON``."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(7)
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool((x == POISON).any()):
            raise RuntimeError("poison value in batch")
        return self.linear(x)


class Grind(torch.nn.Module):
    """A linear classifier that first runs ``rounds`` large matmuls: a long batch."""

    def __init__(self, rounds: int) -> None:
        super().__init__()
        self.rounds = rounds
        self.weight = torch.nn.Parameter(torch.randn(SIDE, SIDE) / SIDE**0.5)
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h: torch.Tensor = self.weight
        for _ in range(self.rounds):
            h = torch.tanh(h @ self.weight)
        return self.linear(x) + 0.0 * h[0, 0]


def on_cuda(name: str, module: torch.nn.Module) -> LoadedModel:
    device = torch.device("cuda")
    return LoadedModel(name, "v1", module.to(device), classifier(), 256, device)


@pytest.fixture
def lanes() -> Iterator[dict[str, LoadedModel]]:
    yield {"m": on_cuda("m", Poisonable())}


def lane_executor(models: dict[str, LoadedModel]) -> CudaLaneExecutor:
    return CudaLaneExecutor(models.__getitem__, torch.device("cuda"))


def batch(lane: Priority, *firsts: float, model: str = "m") -> Batch:
    items = [pending(model, lane=lane, inputs=[x, 1.0, -1.0, 0.5]) for x in firsts]
    return Batch(model, items, formed_s=0.0)


def run_all(executor: Executor, batches: list[Batch]) -> list[BatchRun]:
    futures = [executor.submit(b) for b in batches]
    return [f.result(timeout=60) for f in futures]


@cuda
def test_each_lane_runs_on_its_own_stream_with_priorities_ordered_by_lane(
    lanes: dict[str, LoadedModel],
) -> None:
    executor = lane_executor(lanes)
    try:
        streams = {lane: executor.launchers[lane].stream for lane in LANE_ORDER}
        assert len({s.cuda_stream for s in streams.values()}) == len(LANE_ORDER)
        got = {lane: s.priority for lane, s in streams.items()}
        assert got[HIGH] < got[LOW]  # lower number: higher priority
        assert got[HIGH] <= got[NORMAL] <= got[LOW]
        least, greatest = torch.cuda.Stream.priority_range()  # type: ignore[call-arg]
        if abs(least - greatest) >= 2:  # enough levels for three distinct ones
            assert got[HIGH] < got[NORMAL] < got[LOW]
    finally:
        executor.shutdown()


@cuda
def test_a_high_batch_submitted_during_a_long_low_batch_finishes_first() -> None:
    grind = Grind(rounds=1)
    models = {"fast": on_cuda("fast", Poisonable()), "slow": on_cuda("slow", grind)}
    executor = lane_executor(models)
    try:
        # Warm each lane's thread (cuBLAS handles, allocator pools) before timing anything.
        run_all(executor, [batch(lane, 1.0, model="fast") for lane in LANE_ORDER])
        run_all(executor, [batch(LOW, 1.0, model="slow")])
        grind.rounds = 200  # seconds of float32 matmuls on an H200 (over 0.5 s with TF32)

        done: dict[str, float] = {}

        def note(name: str) -> Callable[[Future[BatchRun]], None]:
            def at(_: Future[BatchRun]) -> None:
                done[name] = time.monotonic()

            return at

        low: Future[BatchRun] = executor.submit(batch(LOW, 1.0, model="slow"))
        low.add_done_callback(note("low"))
        deadline = time.monotonic() + 30
        while executor.cap.held == 0:  # the low launcher holds its permit: it has started
            assert time.monotonic() < deadline
            time.sleep(0.001)
        time.sleep(0.1)  # its kernels are enqueued and running
        assert not low.done()
        high = executor.submit(batch(HIGH, 1.0, model="fast"))
        high.add_done_callback(note("high"))

        high_run, low_run = high.result(timeout=60), low.result(timeout=120)
        assert done["high"] < done["low"]
        assert high_run.results[0].error is None and low_run.results[0].error is None
        assert 0.0 < high_run.compute_s < low_run.compute_s  # device time, from events
    finally:
        executor.shutdown()


@cuda
def test_lane_streams_give_the_compute_threads_results(lanes: dict[str, LoadedModel]) -> None:
    batches = [
        batch(HIGH, 0.0, 1.0, 2.0),
        batch(NORMAL, 3.0, POISON, -1.0, 4.0),  # bisected: the poison fails alone
        batch(LOW, *[float(i) / 7 for i in range(33)]),
    ]
    thread = ThreadExecutor(lanes.__getitem__)
    streams = lane_executor(lanes)
    try:
        expected, got = run_all(thread, batches), run_all(streams, batches)
    finally:
        thread.shutdown()
        streams.shutdown()
    for want, have in zip(expected, got, strict=True):
        assert [r.error is None for r in have.results] == [r.error is None for r in want.results]
        for w, h in zip(want.results, have.results, strict=True):
            if w.error is not None:
                assert h.error is not None and h.error.code == w.error.code
                continue
            assert isinstance(w.outputs, dict) and isinstance(h.outputs, dict)
            assert h.outputs["label"] == w.outputs["label"]
            assert h.outputs["probs"] == pytest.approx(w.outputs["probs"], rel=1e-6, abs=1e-7)
    assert [r.error is not None for r in got[1].results] == [False, True, False, False]


@cuda
def test_pinned_staging_buffers_are_reused_across_batches(lanes: dict[str, LoadedModel]) -> None:
    executor = lane_executor(lanes)
    try:

        def pointers_after(size: int) -> list[int]:
            run_all(executor, [batch(HIGH, *[i / 100 for i in range(size)])])
            held = executor.launchers[HIGH].buffers.held()
            assert held and all(b.is_pinned() for b in held)
            return [b.data_ptr() for b in held]

        first = pointers_after(8)
        assert pointers_after(4) == first
        assert pointers_after(8) == first
        grown = pointers_after(64)  # more than the buffer holds: it grows once
        assert grown != first
        assert pointers_after(8) == grown
        assert pointers_after(64) == grown
    finally:
        executor.shutdown()
