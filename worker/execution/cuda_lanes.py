"""The CUDA backend: one stream per lane, with stream priorities (docs/SCHEDULING.md).

Each lane has a launcher thread (a ``Supervised`` compute thread, under the same
watchdog as the CPU backend) that enqueues its batches' copies and kernels on the lane's
stream, made with ``torch.cuda.Stream(priority=...)``: the high lane gets the highest
priority (the lowest number). Several host threads enqueue, so kernels of different lanes
can be pending at once, which is when priority matters: the device starts pending work of
a higher-priority stream first, but never preempts a kernel that is already running.

A forward pass: the collated inputs are copied into the launcher's reused pinned host
buffers, then to the device with ``non_blocking=True`` on the lane's stream; the module
runs on that stream; the launcher waits on the pass's end event (not on the device) and
splits the outputs. Its compute time is the device time between its start and end events.
The run lease is held until the end event has completed, so the store never moves or
frees weights that queued kernels still read.

Lanes below the top one hold a permit of ``InFlightCap`` while their batch runs, so a
high batch shares the device with at most ``lower_lanes_in_flight`` lower batches; and
with ``yield_to_high`` their launchers wait before taking one while high requests are in
the worker, so those are batches that started before the high request arrived.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any

import torch
from prometheus_client import CollectorRegistry
from pydantic import JsonValue

from consumers.contract import Priority
from worker.base.pending import Batch, BatchRun
from worker.execution.compute_threads import Overrun, Supervised
from worker.execution.executor import SupervisedExecutor, run_batch, timeouts
from worker.execution.host_buffers import HostBuffers
from worker.models import LoadedModel, ModelRegistry
from worker.models.model import to_device
from worker.scheduling.lanes import LANE_ORDER, lane_of
from worker.scheduling.yield_to_high import YieldToHigh
from worker.settings import ComputeConfig


def lane_priorities(
    priority_range: tuple[int, int], lanes: Sequence[Priority] = LANE_ORDER
) -> dict[Priority, int]:
    """Stream priority per lane, ``lanes`` listed from the most urgent, spread over
    ``priority_range`` (as ``torch.cuda.Stream.priority_range()`` gives it, either order;
    a lower number runs first). The first lane gets the highest priority, the last the
    lowest; a lane between rounds toward the lower, so that with few levels only the
    first lane holds the top one."""
    top, bottom = min(priority_range), max(priority_range)
    steps = len(lanes) - 1
    span = bottom - top
    return {lane: top + (-(-i * span // steps) if steps else 0) for i, lane in enumerate(lanes)}


class InFlightCap:
    """At most ``limit`` holders at once; among waiters the lowest ``rank`` (the more
    urgent lane) goes first. Releasing is idempotent per holder: the watchdog writes off
    the permit of a thread it abandoned, and that thread may still return and release."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("the cap must be at least 1")
        self.limit = limit
        self._holders: set[str] = set()
        self._waiting: Counter[int] = Counter()
        self._changed = threading.Condition()

    @property
    def held(self) -> int:
        with self._changed:
            return len(self._holders)

    def acquire(self, holder: str, rank: int) -> None:
        with self._changed:
            self._waiting[rank] += 1
            self._changed.wait_for(
                lambda: len(self._holders) < self.limit and rank <= min(+self._waiting)
            )
            self._waiting[rank] -= 1
            self._holders.add(holder)
            self._changed.notify_all()  # the next most urgent waiter may now be first

    def release(self, holder: str) -> None:
        with self._changed:
            if holder in self._holders:
                self._holders.discard(holder)
                self._changed.notify_all()

    @contextlib.contextmanager
    def holding(self, holder: str, rank: int) -> Iterator[None]:
        self.acquire(holder, rank)
        try:
            yield
        finally:
            self.release(holder)


class StreamLauncher:
    """One launcher thread's CUDA state: a stream at its lane's priority, pinned staging
    buffers, and the event of the last copy out of them. A thread the watchdog replaces
    leaves its launcher behind; its successor gets a new one."""

    def __init__(
        self,
        resolve: Callable[[str], LoadedModel],
        device: torch.device,
        priority: int,
        cap: tuple[InFlightCap, int] | None,
        hold: YieldToHigh | None = None,
        done: YieldToHigh | None = None,
    ) -> None:
        self._resolve = resolve
        self._cap = cap  # (cap, this lane's rank) for lanes below the top one
        self._hold = hold  # lanes below the top one: wait for high batches not yet computed
        self._done = done  # the top lane: its computed batches end those waits
        self.stream = torch.cuda.Stream(device=device, priority=priority)
        self.buffers = HostBuffers(pin=True)
        self._copied = torch.cuda.Event()  # the last host-to-device copy out of the buffers
        self._device_s: float | None = None  # device time of the current batch's passes

    def __call__(self, batch: Batch) -> BatchRun:
        permit: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
        if self._hold is not None:
            self._hold.hold()
        if self._cap is not None:
            cap, rank = self._cap
            permit = cap.holding(threading.current_thread().name, rank)
        # A job window's rows run on this lane's stream too (``_run`` enters it for items).
        rows_stream: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        if batch.rows is not None:
            rows_stream = torch.cuda.stream(self.stream)
        with permit, rows_stream:  # permit first: deadlines are checked once it may run
            self._device_s = None
            try:
                run = run_batch(self._resolve, batch, self._run)
            finally:
                if self._done is not None:
                    self._done.computed(batch)
        if self._device_s is not None:
            run.compute_s = self._device_s
        return run

    def _run(self, model: LoadedModel, items: Sequence[Any]) -> list[JsonValue]:
        if model.device.type != "cuda" or not items:
            return model.run(items)  # nothing for the device to do: as the CPU backend
        collated = model.adapter.collate(items)
        with model.lease.held(), torch.cuda.stream(self.stream), torch.inference_mode():
            # A pass that raised may have left its copy pending: the buffers are reused
            # only once it has landed.
            self._copied.synchronize()
            staged = self.buffers.stage(collated)
            start = torch.cuda.Event(enable_timing=True)
            # blocking: the thread sleeps in synchronize() instead of spinning on a core.
            end = torch.cuda.Event(enable_timing=True, blocking=True)
            start.record(self.stream)
            on_device = to_device(staged, model.device)
            self._copied.record(self.stream)
            output = model.apply(on_device)
            end.record(self.stream)
            end.synchronize()
            # Device time from the copy's start to the last kernel's end, waits behind
            # other streams included; elapsed_time is in milliseconds.
            self._device_s = (self._device_s or 0.0) + start.elapsed_time(end) / 1000
            return model.split(output, len(items))


class CudaLaneExecutor(SupervisedExecutor):
    """Batches of each lane run on that lane's stream, launched by that lane's thread
    (see the module docstring); the executor contract is ``ThreadExecutor``'s."""

    lanes_apart = True

    def __init__(
        self,
        resolve: Callable[[str], LoadedModel],
        device: torch.device,
        *,
        lower_lanes_in_flight: int = 1,
        timeout_s_for: Callable[[str], float | None] | None = None,
        max_hung_threads: int | None = None,
        metrics: CollectorRegistry | None = None,
        yield_to_high: YieldToHigh | None = None,
    ) -> None:
        # A static method in torch; its type stub declares it on instances.
        self.priorities = lane_priorities(torch.cuda.Stream.priority_range())  # type: ignore[call-arg]
        self.cap = InFlightCap(lower_lanes_in_flight)
        # Each lane's current launcher (a replacement once the watchdog abandons one).
        self.launchers: dict[Priority, StreamLauncher] = {}
        self._resolve = resolve
        self._device = device
        self._yield = yield_to_high
        self._lanes = {lane: Supervised(self._launcher_for(lane)) for lane in LANE_ORDER}
        super().__init__(
            list(self._lanes.values()),
            timeout_s_for=timeout_s_for,
            max_hung_threads=max_hung_threads,
            metrics=metrics,
        )

    @classmethod
    def configured(
        cls,
        registry: ModelRegistry,
        config: ComputeConfig,
        metrics: CollectorRegistry,
        device: torch.device,
        yield_to_high: YieldToHigh | None = None,
    ) -> CudaLaneExecutor:
        return cls(
            registry.get,
            device,
            lower_lanes_in_flight=config.lower_lanes_in_flight,
            timeout_s_for=timeouts(registry, config),
            max_hung_threads=config.max_hung_threads,
            metrics=metrics,
            yield_to_high=yield_to_high,
        )

    def submit(self, batch: Batch) -> Future[BatchRun]:
        future: Future[BatchRun] = Future()
        self._lanes[lane_of(batch)].put(batch, future)
        return future

    def _launcher_for(self, lane: Priority) -> Callable[[], StreamLauncher]:
        rank = LANE_ORDER.index(lane)
        cap = (self.cap, rank) if rank else None
        hold, done = (self._yield, None) if rank else (None, self._yield)

        def make() -> StreamLauncher:
            priority = self.priorities[lane]
            launcher = StreamLauncher(self._resolve, self._device, priority, cap, hold, done)
            self.launchers[lane] = launcher
            return launcher

        return make

    def _abandoned(self, overrun: Overrun[BatchRun]) -> None:
        self.cap.release(overrun.thread)  # the hung thread's permit: the lane serves on
