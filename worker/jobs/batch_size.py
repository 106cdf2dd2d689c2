"""A job's batch size: the worker's batch controller, climbing a throughput curve.

A local job is a backlog from its first batch to its last, so the controller's
"backlog with a busy device" rule applies throughout: it hill-climbs the measured curve
(exploring double, half and one step either way) and settles on the size with the most
items/s. No request waits behind a job's batch, so there is no latency target.
``--batch-size`` pins the size instead (the controller's ``fixed`` policy).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

from worker.scheduling.controller import BatchController, Observation
from worker.scheduling.curve import ThroughputCurve
from worker.settings.controller_params import ControllerParams

# One point of the curve: the mean of a size's batches over at least this much forward
# time, or this many batches. On the shared 2-vCPU VM one minilm batch's time varied by
# 16-20% (coefficient of variation, at load 3-4), more than the sizes differ; a point
# of 0.5 s holds several batches. Small numeric batches (well under 1 ms) reach the
# count first, so such a job still climbs to its size in a fraction of a second.
POINT_S = 0.5
POINT_BATCHES = 64


class BatchSizer:
    def __init__(
        self,
        params: ControllerParams,
        max_batch: int,
        *,
        fixed: int | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if fixed is not None:
            self._controller = BatchController(params, fixed, policy="fixed")
        else:
            unbounded = params.model_copy(update={"latency_target_ms": None})
            self._controller = BatchController(unbounded, max_batch)
        self.max_cost = params.max_batch_cost  # the batcher's padded size cap, shared
        self._curve = ThroughputCurve()
        self.batches: Counter[int] = Counter()  # forward passes per size, for the summary
        self._clock = clock
        self._reference: int | None = None
        self._points: dict[int, list[float]] = {}  # size -> [seconds, scaled seconds, batches]
        self._since = clock()
        self._busy_s = 0.0
        self._ran = 0

    @property
    def size(self) -> int:
        return self._controller.cap

    def window(self) -> None:
        """A window's batches begin: utilization counts from here. The time between
        windows (part files, the SQL transaction, progress) is the same at any batch
        size, so it is no sign that the device waits for work."""
        self._since, self._busy_s = self._clock(), 0.0

    def ran(self, size: int, widest: int, compute_s: float, waiting: int) -> None:
        """A batch of ``size`` items, the costliest ``widest``, took ``compute_s``;
        ``waiting`` rows of the job are still to score."""
        self.batches[size] += 1
        self._busy_s += compute_s
        self._ran += 1
        # A length-sorted window runs from its shortest text to its longest, so a size
        # measured early would look faster than one measured late: times are scaled to
        # one padded width (the first batch's), and sizes compare on their own merits.
        if self._reference is None:
            self._reference = widest
        point = self._points.setdefault(size, [0.0, 0.0, 0])
        point[0] += compute_s
        point[1] += compute_s * self._reference / max(widest, 1)
        point[2] += 1
        if point[0] < POINT_S and point[2] < POINT_BATCHES:
            return
        del self._points[size]
        now = self._clock()
        self._curve.record(size, point[1] / point[2], now)
        elapsed = now - self._since
        utilization = min(1.0, self._busy_s / elapsed) if elapsed > 0 else 1.0
        self._controller.decide(Observation(now, utilization, waiting, self._ran), self._curve)
        self._since, self._busy_s, self._ran = now, 0.0, 0
