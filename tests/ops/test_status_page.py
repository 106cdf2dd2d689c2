"""The status page in headless Chromium: it renders the worker's live numbers."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
from pathlib import Path

import orjson
from e2e.support import settings_for
from matplotlib import image

from consumers.client import InferlaneClient
from worker.demo.workload import digits_requests
from worker.facade import Worker
from worker.intake.broker import EmbeddedBroker, free_port
from worker.models import ModelRegistry
from worker.settings import OpsConfig

from .support import aget, require_binary, until

WINDOW = (1280, 1000)


def chromium(url: str, profile: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """Headless Chromium, offline-safe; the virtual time budget lets the page's polling
    script fetch and render before the DOM dump or screenshot."""
    binary = require_binary("chromium")
    return subprocess.run(
        [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--disable-dev-shm-usage", f"--user-data-dir={profile}",
         "--virtual-time-budget=4000", *args, url],
        capture_output=True, timeout=120,
    )  # fmt: skip


async def test_status_page_renders_live_numbers(
    broker: EmbeddedBroker, tmp_path: Path, demo_registry: ModelRegistry
) -> None:
    port = free_port()
    settings = settings_for(
        broker.bootstrap, f"sqlite:///{tmp_path / 's.db'}", ops=OpsConfig(http_port=port)
    )
    base = f"http://127.0.0.1:{port}"
    shot = tmp_path / "status-page.png"
    async with Worker(settings, demo_registry):
        with InferlaneClient(broker.bootstrap) as client:
            await asyncio.to_thread(client.watch_results)
            first = orjson.loads((await aget(f"{base}/status.json"))[1])
            ids = []
            for lane in settings.topics.lane_topics():
                ids += await asyncio.to_thread(
                    client.publish, digits_requests(400, prefix=lane), topic=lane
                )
            client.send_raw(b'{"request_id": "bad-1", "model": "nope", "inputs": [1]}')
            client.flush()
            await asyncio.to_thread(client.results, [*ids, "bad-1"], timeout_s=120)

            async def counted() -> bool:
                body = orjson.loads((await aget(f"{base}/status.json"))[1])
                return sum(v["results_total"] for v in body["lanes"].values()) == len(ids) + 1

            await until(counted, what="every result on the status data")
            second = orjson.loads((await aget(f"{base}/status.json"))[1])
            dom = await asyncio.to_thread(
                chromium, f"{base}/", tmp_path / "profile-dom", "--dump-dom"
            )
            taken = await asyncio.to_thread(
                chromium, f"{base}/", tmp_path / "profile-shot",
                f"--screenshot={shot}", f"--window-size={WINDOW[0]},{WINDOW[1]}",
            )  # fmt: skip

    # The JSON behind the page moved between two reads.
    assert first["lanes"]["normal"]["results_total"] == 0
    assert second["lanes"]["normal"]["results_total"] == 401  # the bad one is rejected there
    assert second["uptime_s"] > first["uptime_s"]
    # The page's script ran and filled the tables with those numbers.
    html = dom.stdout.decode()
    assert dom.returncode == 0, dom.stderr.decode()[-2000:]
    assert ">ready<" in html
    rows = re.findall(r"<tr><td>(high|normal|low)</td>(.*?)</tr>", html)
    assert [lane for lane, _ in rows] == ["high", "normal", "low"]
    totals = {lane: re.findall(r"<td>([^<]*)</td>", cells)[-1] for lane, cells in rows}
    assert totals == {"high": "400", "normal": "401", "low": "400"}
    assert "<td>digits</td>" in html and "unknown_model" in html
    # The screenshot is a rendered page, not a blank one.
    assert taken.returncode == 0 and shot.exists(), taken.stderr.decode()[-2000:]
    pixels = image.imread(str(shot))
    assert pixels.shape[:2] == (WINDOW[1], WINDOW[0])
    assert pixels[..., :3].std() > 0.05
    if keep := os.environ.get("INFERLANE_KEEP_SCREENSHOT"):  # how docs/status-page.png is made
        shutil.copyfile(shot, keep)
