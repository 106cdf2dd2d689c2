"""``inferlane models list --url`` shows a running worker's tiers, bytes and last use
(its ``/models.json``); without ``--url`` the table says it shows the registry only."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import orjson
from e2e.support import settings_for, wait_for_rows

from consumers.client import InferlaneClient
from storage import make_engine
from worker.demo.workload import digits_requests
from worker.facade import Worker
from worker.intake.broker import EmbeddedBroker, free_port
from worker.models import ModelRegistry
from worker.settings import OpsConfig

from .support import aget


def _models_list(*args: str, models: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "INFERLANE_MODEL_CACHE": str(models.parent)}
    return subprocess.run(
        [sys.executable, "-m", "worker", "models", "list", *args],
        env=env, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip


def _row(output: str, name: str) -> list[str]:
    (line,) = [line for line in output.splitlines() if line.startswith(f"│ {name} ")]
    return [cell.strip() for cell in line.strip("│").split("│")]


async def test_models_list_shows_a_running_workers_tiers(
    broker: EmbeddedBroker, tmp_path: Path, demo_registry: ModelRegistry, demo_registry_path: Path
) -> None:
    port = free_port()
    db = f"sqlite:///{tmp_path / 'live.db'}"
    settings = settings_for(broker.bootstrap, db, ops=OpsConfig(http_port=port))
    engine = make_engine(db)
    try:
        async with Worker(settings, demo_registry):
            with InferlaneClient(broker.bootstrap) as client:
                await asyncio.to_thread(client.publish, digits_requests(20))
            assert await asyncio.to_thread(wait_for_rows, engine, 20) == 20
            status, body = await aget(f"http://127.0.0.1:{port}/models.json")
            served = {m["name"]: m for m in orjson.loads(body)["models"]}
            live = await asyncio.to_thread(
                _models_list, "--url", f"http://127.0.0.1:{port}", models=demo_registry_path
            )
    finally:
        engine.dispose()
    assert status == 200 and set(served) == {"digits", "diabetes", "minilm"}
    digits = served["digits"]
    assert digits["tier"] == "device" and digits["bytes"] > 0 and digits["last_used_s"] > 0

    assert live.returncode == 0, live.stderr
    assert f"models of the worker at http://127.0.0.1:{port} (live)" in live.stdout
    _, _, _, tier, size, used = _row(live.stdout, "digits")
    assert (tier, size, used != "-") == ("device", f"{digits['bytes']:,}", True)

    # Its own process loads nothing: the registry only, and it says so.
    local = await asyncio.to_thread(_models_list, "--models", str(demo_registry_path),
                                    models=demo_registry_path)  # fmt: skip
    assert local.returncode == 0, local.stderr
    assert "models of the registry (this command's own process" in local.stdout
    _, _, _, tier, _, used = _row(local.stdout, "digits")
    assert (tier, used) == ("disk", "-")

    gone = await asyncio.to_thread(_models_list, "--url", f"http://127.0.0.1:{free_port()}",
                                   models=demo_registry_path)  # fmt: skip
    assert gone.returncode == 1 and "no model list from a worker at" in gone.stdout
