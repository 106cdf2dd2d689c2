"""Gauges of live state, sampled when scraped: nothing per record, nothing when unread."""

from __future__ import annotations

import asyncio
import logging

from prometheus_client import CollectorRegistry, ProcessCollector

from consumers.offsets import TopicPartitionKey
from worker.base.blocking import off_loop
from worker.base.metric_set import MetricSet, gauge
from worker.ops.gpu import Nvml
from worker.ops.readiness import Readiness
from worker.ops.view import WorkerView

log = logging.getLogger(__name__)

_LAG_TIMEOUT_S = 1.0


class GpuGauges(MetricSet):
    used = gauge("inferlane_gpu_memory_used_bytes", "GPU memory used", "gpu")
    total = gauge("inferlane_gpu_memory_total_bytes", "GPU memory", "gpu")
    busy = gauge("inferlane_gpu_utilization_ratio", "GPU busy fraction (NVML)", "gpu")


class LiveGauges(MetricSet):
    """``await refresh()`` on the event loop, then render the registry from any thread."""

    lane_depth = gauge("inferlane_lane_depth_requests", "Requests waiting, per lane", "lane")
    in_flight_bytes = gauge(
        "inferlane_in_flight_bytes", "Bytes of consumed records not yet durable"
    )
    paused = gauge("inferlane_paused_partitions", "Partitions paused by backpressure")
    assigned = gauge("inferlane_assigned_partitions", "Partitions this worker consumes")
    lag = gauge(
        "inferlane_consumer_lag_records",
        "Records behind the high watermark of the partition's last fetch. Approximate on "
        "the embedded broker (Tansu): as old as the last fetch; its ListOffsets counts "
        "batches, so only the fetch watermark is used.",
        "topic",
        "partition",
    )
    ready = gauge("inferlane_ready", "1 when /readyz answers 200")
    check = gauge("inferlane_ready_check", "Readiness checks: 1 passing, 0 failing", "check")

    def __init__(self, registry: CollectorRegistry, view: WorkerView) -> None:
        super().__init__(registry)
        self._view = view
        ProcessCollector(namespace="inferlane", registry=registry)  # RSS, CPU, open files
        self._nvml = Nvml()
        self._lag_seen: set[TopicPartitionKey] = set()
        self._gpu = GpuGauges(registry) if self._nvml.available else None

    async def refresh(self, readiness: Readiness) -> None:
        view = self._view
        intake = view.intake
        for lane, depth in intake.lane_depths().items():
            self.lane_depth.labels(lane).set(depth)
        self.in_flight_bytes.set(intake.in_flight_bytes())
        self.paused.set(len(intake.paused_partitions()))
        self.assigned.set(len(intake.assignment))
        self.ready.set(1 if readiness.ready else 0)
        for name, ok in readiness.checks.items():
            self.check.labels(name).set(1 if ok else 0)
        await self._refresh_lag()
        if self._gpu is not None:
            for g in await off_loop(self._nvml.read):
                gpu = str(g.index)
                self._gpu.used.labels(gpu).set(g.memory_used_bytes)
                self._gpu.total.labels(gpu).set(g.memory_total_bytes)
                self._gpu.busy.labels(gpu).set(g.utilization_ratio)

    async def _refresh_lag(self) -> None:
        try:
            lag = await asyncio.wait_for(self._view.intake.consumer_lag(), _LAG_TIMEOUT_S)
        except Exception as exc:  # a rebalance under way, a partition just reset
            log.debug("consumer lag unavailable: %s", exc)
            return
        for (topic, partition), n in lag.items():
            self.lag.labels(topic, str(partition)).set(n)
        # A partition handed to another worker stops being ours to report.
        for topic, partition in self._lag_seen - lag.keys():
            self.lag.remove(topic, str(partition))
        self._lag_seen = set(lag)
