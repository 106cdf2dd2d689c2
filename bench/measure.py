"""Measurement helpers: quantiles, throughput over a window, RSS sampling, CPU steal."""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psutil

_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    """Resident set size of this process, from /proc (no psutil call on the hot path)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * _PAGE_BYTES


class Steal:
    """The share of this VM's CPU time its host took (steal) since it was made: time
    its vCPUs were ready to run and did not. A run under heavy steal measured the
    host's other tenants as much as the system under test."""

    def __init__(self) -> None:
        self._start = psutil.cpu_times()

    def share(self) -> float:
        now = psutil.cpu_times()
        total = _elapsed(now) - _elapsed(self._start)
        stolen = getattr(now, "steal", 0.0) - getattr(self._start, "steal", 0.0)
        return round(stolen / total, 3) if total > 0 else 0.0


def _elapsed(times: Any) -> float:
    # Linux counts guest time inside user and nice as well: not twice.
    guest = getattr(times, "guest", 0.0) + getattr(times, "guest_nice", 0.0)
    return float(sum(times) - guest)


def quantile(values: Sequence[float], q: float) -> float:
    """Nearest-rank quantile; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return float(ordered[rank])


@dataclass(frozen=True, slots=True)
class Latency:
    p50_ms: float
    p99_ms: float
    samples: int

    @classmethod
    def of(cls, values_ms: Sequence[float]) -> Latency:
        return cls(quantile(values_ms, 0.5), quantile(values_ms, 0.99), len(values_ms))


@dataclass(frozen=True, slots=True)
class Arrival:
    """Results read in one fetch: when they arrived (monotonic and wall clock), and how many."""

    mono_s: float
    wall_s: float
    values: list[bytes]
    # Each result's Kafka timestamp (epoch ms): when the worker's producer stamped it.
    stamps_ms: list[int] = field(default_factory=list)


def window_rate(arrivals: Sequence[Arrival]) -> tuple[float, int, float]:
    """(results/s, results counted, seconds) from the first fetch that returned results
    to the last one; the first fetch's results are not counted (they mark the start)."""
    filled = [a for a in arrivals if a.values]
    if len(filled) < 2:
        return 0.0, 0, 0.0
    seconds = filled[-1].mono_s - filled[0].mono_s
    counted = sum(len(a.values) for a in filled[1:])
    return (counted / seconds if seconds > 0 else 0.0), counted, seconds


@dataclass
class RssSampler:
    """Samples a process's resident set size every ``interval_s`` on a daemon thread."""

    pid: int
    interval_s: float = 0.5
    samples: list[tuple[float, int]] = field(default_factory=list)  # (monotonic s, bytes)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def start(self) -> RssSampler:
        self._thread = threading.Thread(target=self._loop, name="bench-rss", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def _loop(self) -> None:
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(self.pid)
            while not self._stop.is_set():
                self.samples.append((time.monotonic(), proc.memory_info().rss))
                self._stop.wait(self.interval_s)

    @property
    def peak_mb(self) -> float:
        return max((rss for _, rss in self.samples), default=0) / 2**20

    def rss_at(self, mono_s: float) -> int:
        """The last sample taken at or before ``mono_s`` (the first one if none was)."""
        before = [rss for t, rss in self.samples if t <= mono_s]
        return before[-1] if before else (self.samples[0][1] if self.samples else 0)
