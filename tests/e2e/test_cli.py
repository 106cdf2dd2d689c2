"""The command line as users run it: no orphan broker after Ctrl-C, SIGTERM or kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from worker.intake.broker import EmbeddedBroker, free_port

from .support import read_topic


def inferlane(*args: str, log: Path, models: Path | None = None) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    if models is not None:
        env["INFERLANE_MODEL_CACHE"] = str(models.parent)
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "worker", *args], env=env, stdout=out, stderr=subprocess.STDOUT
        )


def wait_for_broker_child(
    proc: subprocess.Popen[bytes], log: Path, ready: str, timeout_s: float = 60
) -> psutil.Process:
    """The broker process, once the command has printed ``ready``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        if ready in log.read_text():
            brokers = [c for c in psutil.Process(proc.pid).children() if "tansu" in c.name()]
            assert len(brokers) == 1
            return brokers[0]
        time.sleep(0.05)
    raise AssertionError(f"{ready!r} not printed: {log.read_text()}")


def gone(process: psutil.Process, timeout_s: float = 10) -> bool:
    try:
        process.wait(timeout=timeout_s)
    except psutil.TimeoutExpired:
        return False
    return True


def test_broker_command_stops_its_broker_on_ctrl_c(tmp_path: Path) -> None:
    log = tmp_path / "broker.log"
    proc = inferlane("broker", "--port", str(free_port()), log=log)
    child = wait_for_broker_child(proc, log, "broker listening")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=15) == 0
    assert gone(child)


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_run_with_embedded_broker_leaves_no_orphan(
    how: signal.Signals, tmp_path: Path, demo_registry_path: Path
) -> None:
    log = tmp_path / "run.log"
    # No HTTP port: 9400 may be taken on a shared machine, and `run` refuses a taken one.
    proc = inferlane(
        "run", "--database", f"sqlite:///{tmp_path / 'r.db'}", "--http-port", "0",
        log=log, models=demo_registry_path,
    )  # fmt: skip
    child = wait_for_broker_child(proc, log, "inferlane serving")
    proc.send_signal(how)
    code = proc.wait(timeout=60)
    assert code == (-signal.SIGKILL if how == signal.SIGKILL else 0)
    assert gone(child), f"broker outlived its worker after {how.name}"


def test_publish_sends_every_line_as_is(broker: EmbeddedBroker, tmp_path: Path) -> None:
    lines = [
        b'{"request_id": "a", "model": "diabetes", "inputs": [0,0,0,0,0,0,0,0,0,0]}',
        b"not json at all",
        b'{"request_id": "b", "model": "digits", "inputs": [1]}',
    ]
    path = tmp_path / "requests.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n\n")
    log = tmp_path / "publish.log"
    proc = inferlane("publish", str(path), "--bootstrap", broker.bootstrap, log=log)
    assert proc.wait(timeout=60) == 0, log.read_text()
    assert "published 3 records" in log.read_text()
    records = read_topic(broker.bootstrap, "inferlane.requests", 3)
    assert sorted(r.value for r in records) == sorted(lines)
    keys = {r.value: r.key for r in records}
    assert keys[lines[0]] == b"a" and keys[lines[1]] is None
