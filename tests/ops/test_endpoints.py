"""The ops HTTP surface of a real worker on the embedded broker, under load."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import orjson
import torch
from e2e.support import settings_for
from prometheus_client.parser import text_string_to_metric_families

from consumers.client import InferlaneClient
from worker.demo.workload import digits_requests
from worker.facade import Worker
from worker.intake.broker import EmbeddedBroker, free_port
from worker.models import ModelRegistry
from worker.settings import OpsConfig

from .support import aget, until

N = 3000
BAD = 7


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _sum(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **want: str):
    return sum(
        v for (n, labels), v in samples.items()
        if n == name and all(dict(labels).get(k) == x for k, x in want.items())
    )  # fmt: skip


async def test_endpoints_report_the_pipeline_under_load(
    broker: EmbeddedBroker, tmp_path: Path, demo_registry: ModelRegistry
) -> None:
    port = free_port()
    settings = settings_for(
        broker.bootstrap, f"sqlite:///{tmp_path / 'ops.db'}", ops=OpsConfig(http_port=port)
    )
    base = f"http://127.0.0.1:{port}"
    async with Worker(settings, demo_registry) as worker:
        assert (await aget(f"{base}/healthz"))[0] == 200

        async def ready() -> bool:
            return (await aget(f"{base}/readyz"))[0] == 200

        await until(ready, what="/readyz 200")
        with InferlaneClient(broker.bootstrap) as client:
            await asyncio.to_thread(client.watch_results)
            publishing = asyncio.create_task(
                asyncio.to_thread(client.publish, digits_requests(N, prefix="load"))
            )
            # Scrapes while the backlog is served: every one answers, none stalls the work.
            reads: list[dict] = []

            async def moved() -> bool:
                status, body = await aget(f"{base}/status.json")
                assert status == 200
                reads.append(orjson.loads(body))
                assert (await aget(f"{base}/metrics"))[0] == 200
                totals = [r["lanes"]["normal"]["results_total"] for r in reads]
                return publishing.done() and totals[-1] > totals[0]

            await until(moved, what="status.json numbers to change")
            ids = await publishing
            for i in range(BAD):
                client.send_raw(b'{"request_id": "bad-%d", "model": "nope", "inputs": [1]}' % i,
                                key=b"bad-%d" % i)  # fmt: skip
            client.flush()
            await asyncio.to_thread(
                client.results, ids + [f"bad-{i}" for i in range(BAD)], timeout_s=120
            )

        async def all_counted() -> bool:
            _, body = await aget(f"{base}/metrics")
            s = _samples(body.decode())
            return _sum(s, "inferlane_request_latency_seconds_count") >= N + BAD

        await until(all_counted, what="every result in the histograms")
        _, body = await aget(f"{base}/metrics")
        samples = _samples(body.decode())
        status_body = orjson.loads((await aget(f"{base}/status.json"))[1])
        assert worker.models_warm

    assert _sum(samples, "inferlane_results_total", status="ok", model="digits") == N
    assert _sum(samples, "inferlane_results_total", status="rejected") == BAD
    assert _sum(samples, "inferlane_dead_letters_total", reason="unknown_model") == BAD
    assert _sum(samples, "inferlane_records_consumed_total") == N + BAD
    for stage in ("request", "queue", "compute", "publish"):
        name = f"inferlane_{stage}_latency_seconds"
        assert _sum(samples, f"{name}_count", lane="normal", model="digits") == N
        assert _sum(samples, f"{name}_bucket", lane="normal", model="digits", le="+Inf") == N
        assert _sum(samples, f"{name}_sum", lane="normal", model="digits") > 0
    assert _sum(samples, "inferlane_compute_busy_seconds_total", model="digits") > 0
    assert _sum(samples, "inferlane_batch_size_requests_sum", model="digits") == N
    # Serving N requests allocated enough to run the collector's young passes, timed.
    assert _sum(samples, "inferlane_gc_pause_seconds_count", generation="0") > 0
    assert _sum(samples, "inferlane_batch_cap_requests", model="digits") >= 1
    assert {dict(k[1]).get("lane") for k in samples if k[0] == "inferlane_lane_depth_requests"} \
        == {"high", "normal", "low"}  # fmt: skip
    lag = [k for k in samples if k[0] == "inferlane_consumer_lag_records"]
    assert len(lag) == 3 * settings.topics.partitions
    assert all(samples[k] == 0 for k in lag)  # everything served: nothing behind
    assert samples[("inferlane_process_resident_memory_bytes", ())] > 50 * 2**20
    assert samples[("inferlane_ready", ())] == 1
    assert samples[("inferlane_in_flight_bytes", ())] == 0  # all durable
    gpu = any(k[0].startswith("inferlane_gpu_") for k in samples)
    assert gpu == torch.cuda.is_available()  # NVML read only where a device is

    # The status page's data moved while the backlog was served.
    totals = [r["lanes"]["normal"]["results_total"] for r in reads]
    assert totals == sorted(totals) and totals[-1] > totals[0]
    assert status_body["models"]["digits"]["results_total"] == N
    assert status_body["lanes"]["normal"]["p99_ms"] is not None
    assert {e["code"] for e in status_body["errors"]} == {"unknown_model"}
    assert status_body["readiness"]["ready"] is True


async def test_page_is_self_contained_and_unknown_paths_404(
    broker: EmbeddedBroker, tmp_path: Path, demo_registry: ModelRegistry
) -> None:
    port = free_port()
    settings = settings_for(
        broker.bootstrap, f"sqlite:///{tmp_path / 'ops.db'}", ops=OpsConfig(http_port=port)
    )
    async with Worker(settings, demo_registry):
        status, page = await aget(f"http://127.0.0.1:{port}/")
        missing, _ = await aget(f"http://127.0.0.1:{port}/nope")
    assert status == 200 and b"<script>" in page and b"status.json" in page
    # No external assets: nothing fetched from another origin.
    assert not re.search(rb"""(src|href)=["']?(https?:)?//""", page)
    assert missing == 404


async def test_port_zero_serves_nothing(
    broker: EmbeddedBroker, tmp_path: Path, demo_registry: ModelRegistry
) -> None:
    settings = settings_for(
        broker.bootstrap, f"sqlite:///{tmp_path / 'ops.db'}", ops=OpsConfig(http_port=0)
    )
    worker = Worker(settings, demo_registry)
    async with worker:
        assert worker._ops.port is None
