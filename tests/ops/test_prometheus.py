"""A real Prometheus scrapes a real worker; every dashboard panel's query returns data."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
from e2e.support import settings_for

from consumers.client import InferlaneClient
from worker.demo.workload import digits_requests
from worker.facade import Worker
from worker.intake.broker import EmbeddedBroker, free_port, terminate
from worker.models import ModelRegistry
from worker.settings import OpsConfig

from .support import aget, get, require_binary, until

COMPOSE = Path(__file__).parents[2] / "compose"
DASHBOARD = COMPOSE / "grafana" / "dashboards" / "inferlane.json"


def panel_queries() -> list[tuple[str, str, bool]]:
    """(panel title, expression, optional) for every target of the dashboard."""
    dashboard = json.loads(DASHBOARD.read_text())
    return [
        (p["title"], t["expr"], p.get("description", "").startswith("Optional"))
        for p in dashboard["panels"]
        for t in p["targets"]
    ]


@contextlib.contextmanager
def prometheus(tmp: Path, worker_port: int) -> Iterator[str]:
    binary = require_binary("prometheus")
    port = free_port()
    config = tmp / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{COMPOSE / 'prometheus' / 'alerts.yml'}']\n"
        "scrape_configs:\n"
        "  - job_name: inferlane\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{worker_port}']}}]\n"
    )
    log = (tmp / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        # Its API answers 503 until the TSDB is open: slow on a busy machine.
        deadline = time.monotonic() + 60
        while _ready(base) != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        yield base
    finally:
        terminate(proc, grace_s=5)
        log.close()


def _ready(base: str) -> int | None:
    try:
        return get(f"{base}/-/ready", timeout_s=2)[0]
    except OSError:  # not listening yet
        return None


async def query(base: str, expr: str) -> dict[str, Any]:
    status, body = await aget(f"{base}/api/v1/query?query={urllib.parse.quote(expr)}")
    assert status == 200, body
    answer: dict[str, Any] = orjson.loads(body)
    assert answer["status"] == "success", answer
    return answer["data"]


async def test_prometheus_scrapes_the_worker_and_every_panel_has_data(
    broker: EmbeddedBroker, tmp_path: Path, demo_registry: ModelRegistry
) -> None:
    port = free_port()
    settings = settings_for(
        broker.bootstrap, f"sqlite:///{tmp_path / 'p.db'}", ops=OpsConfig(http_port=port)
    )
    stop = asyncio.Event()

    def load(client: InferlaneClient, round_: int) -> None:
        for lane in settings.topics.lane_topics():
            client.publish(digits_requests(100, prefix=f"r{round_}-{lane}"), topic=lane)
        client.send_raw(b'{"request_id": "bad-%d", "model": "nope", "inputs": [1]}' % round_)
        client.flush()

    async def keep_loading(client: InferlaneClient) -> None:
        round_ = 0
        while not stop.is_set():
            await asyncio.to_thread(load, client, round_)
            round_ += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)

    async with Worker(settings, demo_registry):
        with InferlaneClient(broker.bootstrap) as client, prometheus(tmp_path, port) as base:
            loader = asyncio.create_task(keep_loading(client))
            try:

                async def scraped() -> bool:
                    with contextlib.suppress(OSError):
                        data = await query(base, "inferlane_results_total")
                        return bool(data["result"])
                    return False

                await until(scraped, timeout_s=90, what="Prometheus to scrape results")
                empty: dict[str, str] = {}
                for title, expr, optional in panel_queries():
                    if optional:
                        await query(base, expr)  # valid PromQL; data only with that subsystem
                        continue

                    async def has_data(expr: str = expr) -> bool:
                        return bool((await query(base, expr))["result"])

                    try:
                        await until(has_data, timeout_s=60, what=expr)
                    except AssertionError:
                        empty[title] = expr
                rules = (await aget(f"{base}/api/v1/rules"))[1]
                up = await query(base, 'up{job="inferlane"}')
            finally:
                stop.set()
                await loader
    assert not empty, f"panels without data: {empty}"
    loaded = [r["name"] for g in orjson.loads(rules)["data"]["groups"] for r in g["rules"]]
    assert len(loaded) == 8
    assert [s["value"][1] for s in up["result"]] == ["1"]
