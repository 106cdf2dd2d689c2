"""Utilization probes: how busy the compute device has been lately, as a 0..1 fraction.

CPU: the compute thread's busy fraction over a sliding window (the busiest lane's where
lanes compute on threads of their own), from the start and end of each batch it ran
(``BusyWindow``, pure: the clock is passed in). GPU: NVML's device utilization
(``pynvml`` from nvidia-ml-py), read on a timer thread, never on the hot path. NVML
samples over 1/6 to 1 s and reads 100% whenever any kernel runs, so it is a coarse
signal; the controller combines it with queue depth and measured throughput. Where NVML
or CUDA is absent, ``open_probe`` returns the CPU probe, without error.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import deque
from typing import Protocol

from consumers.contract import Priority
from worker.base.blocking import own_thread

log = logging.getLogger(__name__)


class Probe(Protocol):
    def ran(self, started_s: float, ended_s: float, lane: Priority | None = None) -> None:
        """A batch computed from ``started_s`` to ``ended_s`` (monotonic); ``lane``: on
        that lane's own compute (lane threads), None: on the one compute thread."""

    def utilization(self, now_s: float) -> float | None:
        """0..1 over the recent past; None before the first measurement."""

    def close(self) -> None: ...


class BusyWindow:
    """Busy fraction of the compute over the last ``window_s`` (the CPU probe): of the one
    compute thread, or, where lanes compute apart, of the busiest lane's. Summed across
    lanes, a high lane's batches running beside a bulk backlog on a thread of their own
    would read as load on the backlog's thread, and its cap would shrink."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._spans: dict[Priority | None, deque[tuple[float, float]]] = {}

    def ran(self, started_s: float, ended_s: float, lane: Priority | None = None) -> None:
        self._spans.setdefault(lane, deque()).append((started_s, ended_s))

    def utilization(self, now_s: float) -> float | None:
        if not self._spans:
            return None
        since = now_s - self.window_s
        busiest = 0.0
        for spans in self._spans.values():
            while spans and spans[0][1] <= since:
                spans.popleft()
            busy = sum(min(end, now_s) - max(start, since) for start, end in spans)
            busiest = max(busiest, busy)
        return min(1.0, max(0.0, busiest / self.window_s))

    def close(self) -> None:
        pass


class NvmlProbe:
    """GPU utilization from NVML, refreshed every ``every_s`` by a daemon thread."""

    def __init__(self, device_index: int, every_s: float) -> None:
        import pynvml

        pynvml.nvmlInit()
        self._nvml = pynvml
        self._handle = pynvml.nvmlDeviceGetHandleByIndex(device_index)
        self._every_s = every_s
        self._value: float | None = None
        self._stop = threading.Event()
        self._thread = own_thread("nvml", self._poll)

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                rates = self._nvml.nvmlDeviceGetUtilizationRates(self._handle)
                self._value = rates.gpu / 100.0
            except self._nvml.NVMLError as exc:  # a transient driver error: keep the last
                log.debug("NVML utilization read failed: %s", exc)
            self._stop.wait(self._every_s)

    def ran(self, started_s: float, ended_s: float, lane: Priority | None = None) -> None:
        pass  # NVML measures the device itself

    def utilization(self, now_s: float) -> float | None:
        return self._value

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2 * self._every_s)
        with contextlib.suppress(self._nvml.NVMLError):
            self._nvml.nvmlShutdown()


def open_probe(*, cuda_index: int | None, window_s: float, nvml_every_s: float) -> Probe:
    """NVML for a CUDA device when the driver library answers; otherwise the CPU probe."""
    if cuda_index is not None:
        try:
            return NvmlProbe(cuda_index, nvml_every_s)
        except Exception as exc:  # no library, no driver, no such device: CPU probe
            log.info("NVML unavailable (%s); utilization from compute-thread busy time", exc)
    return BusyWindow(window_s)
