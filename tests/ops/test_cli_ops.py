"""``inferlane run`` serves the ops port without a flag (its env name here) and writes
JSON logs without payloads or the database password."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from sqlalchemy import make_url

from consumers.client import InferlaneClient
from worker.intake.broker import EmbeddedBroker, free_port

from .support import aget, until

PASSWORD = "cli-Secret-0815"  # trust auth accepts any password
MARKER = "CLI-PAYLOAD-7f2e"


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
async def test_run_serves_ops_and_logs_json_cleanly(
    broker: EmbeddedBroker, db_url: str, demo_registry_path: Path, tmp_path: Path
) -> None:
    port = free_port()
    env = {
        **os.environ,
        "INFERLANE_OPS__HTTP_PORT": str(port),
        "INFERLANE_MODEL_CACHE": str(demo_registry_path.parent),
        "INFERLANE_KAFKA__SESSION_TIMEOUT_MS": "6000",
        "INFERLANE_KAFKA__GROUP_ID": "cli-ops",
    }
    url = make_url(db_url).set(password=PASSWORD).render_as_string(hide_password=False)
    log = tmp_path / "run.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "worker", "run", "--bootstrap", broker.bootstrap,
             "--database", url, "--log-format", "json"],
            env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:

        async def ready() -> bool:
            assert proc.poll() is None, log.read_text()
            try:
                return (await aget(f"{base}/readyz"))[0] == 200
            except OSError:  # not listening yet
                return False

        await until(ready, timeout_s=120, what="inferlane run to be ready")
        assert (await aget(f"{base}/healthz"))[0] == 200
        status, metrics = await aget(f"{base}/metrics")
        assert status == 200 and b"inferlane_ready 1.0" in metrics
        status, page = await aget(f"{base}/")
        assert status == 200 and b"<title>inferlane worker</title>" in page
        with InferlaneClient(broker.bootstrap) as client:
            value = b'{"request_id": "bad-cli", "model": "digits", "inputs": "%s"}'
            client.send_raw(value % MARKER.encode(), key=b"bad-cli")
            client.flush()

        async def logged() -> bool:
            return b'"request_id":"bad-cli"' in log.read_bytes()

        await until(logged, what="the failed request in the log")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    entries = [orjson.loads(line) for line in text.splitlines() if line.startswith("{")]
    assert any(e.get("error_code") == "bad_input" for e in entries)
    assert all({"ts", "level", "logger", "message"} <= e.keys() for e in entries)
    assert MARKER not in text
    assert PASSWORD not in text
    assert "***@" in text  # the banner names the database, password masked
