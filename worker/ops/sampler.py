"""Gauges of live state, sampled when scraped: nothing per record, nothing when unread."""

from __future__ import annotations

import asyncio
import logging

from prometheus_client import CollectorRegistry, Gauge, ProcessCollector

from consumers.offsets import TopicPartitionKey
from worker.ops.gpu import Nvml
from worker.ops.readiness import Readiness
from worker.ops.view import WorkerView

log = logging.getLogger(__name__)

_LAG_TIMEOUT_S = 1.0


class LiveGauges:
    """``await refresh()`` on the event loop, then render the registry from any thread."""

    def __init__(self, registry: CollectorRegistry, view: WorkerView) -> None:
        r = registry
        self._view = view
        self.lane_depth = Gauge(
            "inferlane_lane_depth_requests", "Requests waiting, per lane", ["lane"], registry=r
        )
        self.in_flight_bytes = Gauge(
            "inferlane_in_flight_bytes", "Bytes of consumed records not yet durable", registry=r
        )
        self.paused = Gauge(
            "inferlane_paused_partitions", "Partitions paused by backpressure", registry=r
        )
        self.assigned = Gauge(
            "inferlane_assigned_partitions", "Partitions this worker consumes", registry=r
        )
        self.lag = Gauge(
            "inferlane_consumer_lag_records",
            "Records behind the high watermark of the partition's last fetch. Approximate on "
            "the embedded broker (Tansu): as old as the last fetch; its ListOffsets counts "
            "batches, so only the fetch watermark is used.",
            ["topic", "partition"],
            registry=r,
        )
        self.ready = Gauge("inferlane_ready", "1 when /readyz answers 200", registry=r)
        self.check = Gauge(
            "inferlane_ready_check", "Readiness checks: 1 passing, 0 failing", ["check"], registry=r
        )
        ProcessCollector(namespace="inferlane", registry=r)  # RSS, CPU, open files
        self._nvml = Nvml()
        self._lag_seen: set[TopicPartitionKey] = set()
        if self._nvml.available:
            self.gpu_used = Gauge(
                "inferlane_gpu_memory_used_bytes", "GPU memory used", ["gpu"], registry=r
            )
            self.gpu_total = Gauge(
                "inferlane_gpu_memory_total_bytes", "GPU memory", ["gpu"], registry=r
            )
            self.gpu_busy = Gauge(
                "inferlane_gpu_utilization_ratio", "GPU busy fraction (NVML)", ["gpu"], registry=r
            )

    async def refresh(self, readiness: Readiness) -> None:
        view = self._view
        for lane, depth in view.lane_depths().items():
            self.lane_depth.labels(lane).set(depth)
        self.in_flight_bytes.set(view.in_flight_bytes())
        self.paused.set(len(view.paused_partitions()))
        self.assigned.set(len(view.assignment))
        self.ready.set(1 if readiness.ready else 0)
        for name, ok in readiness.checks.items():
            self.check.labels(name).set(1 if ok else 0)
        await self._refresh_lag()
        if self._nvml.available:
            for g in await asyncio.to_thread(self._nvml.read):
                gpu = str(g.index)
                self.gpu_used.labels(gpu).set(g.memory_used_bytes)
                self.gpu_total.labels(gpu).set(g.memory_total_bytes)
                self.gpu_busy.labels(gpu).set(g.utilization_ratio)

    async def _refresh_lag(self) -> None:
        try:
            lag = await asyncio.wait_for(self._view.consumer_lag(), _LAG_TIMEOUT_S)
        except Exception as exc:  # a rebalance under way, a partition just reset
            log.debug("consumer lag unavailable: %s", exc)
            return
        for (topic, partition), n in lag.items():
            self.lag.labels(topic, str(partition)).set(n)
        # A partition handed to another worker stops being ours to report.
        for topic, partition in self._lag_seen - lag.keys():
            self.lag.remove(topic, str(partition))
        self._lag_seen = set(lag)
