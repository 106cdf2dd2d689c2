"""A producer that makes up a new model name for every record grows neither the worker's
/metrics nor /status.json nor its memory: unknown names share one label."""

from __future__ import annotations

import re
import time
from pathlib import Path

import psutil
import pytest

from consumers.client import InferlaneClient
from storage import make_engine
from worker.intake.broker import EmbeddedBroker, free_port

from .support import wait_for_rows
from .test_cli import inferlane

FLOOD = 10_000
# What the worker's pages weigh after the flood (with it, before the fix: /metrics
# grew by about 26 KB per made-up name, /status.json by 300 bytes).
MAX_METRICS_BYTES = 128 * 1024
MAX_STATUS_BYTES = 64 * 1024
MAX_RSS_GROWTH = 0.10


def _get(url: str) -> bytes:
    import urllib.request

    with urllib.request.urlopen(url, timeout=60) as resp:
        return bytes(resp.read())


def _flood(bootstrap: str, prefix: str, n: int) -> None:
    """``n`` records, each naming a model of its own (206 characters, as in the report)."""
    with InferlaneClient(bootstrap) as client:
        for i in range(n):
            name = f"{prefix}-{i:06d}-".ljust(206, "x")
            value = b'{"request_id": "%s-%d", "model": "%s", "inputs": [1]}' % (
                prefix.encode(),
                i,
                name.encode(),
            )
            client.send_raw(value, key=f"{prefix}-{i}".encode())
        client.flush()


def _settled_rss(process: psutil.Process, timeout_s: float = 60.0) -> int:
    """RSS once two reads a second apart agree within 1% (a chunk's garbage is freed)."""
    deadline = time.monotonic() + timeout_s
    last = process.memory_info().rss
    while time.monotonic() < deadline:
        time.sleep(1.0)  # the interval of the comparison, not a wait for an event
        now = process.memory_info().rss
        if abs(now - last) <= 0.01 * last:
            return now
        last = now
    return last


@pytest.mark.timeout(600)
def test_made_up_model_names_grow_nothing(
    broker: EmbeddedBroker, tmp_path: Path, demo_registry_path: Path
) -> None:
    port = free_port()
    db = f"sqlite:///{tmp_path / 'hostile.db'}"
    proc = inferlane(
        "run", "--bootstrap", broker.bootstrap, "--database", db, "--models",
        str(demo_registry_path), "--http-port", str(port),
        log=tmp_path / "run.log",
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    engine = make_engine(db)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (tmp_path / "run.log").read_text()
            try:
                if b'"ready":true' in _get(f"{base}/readyz"):
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the worker never became ready"
            time.sleep(0.2)
        worker = psutil.Process(proc.pid)

        # Warm-up: the same traffic, so that the allocator has seen its peak.
        _flood(broker.bootstrap, "warm", FLOOD)
        assert wait_for_rows(engine, FLOOD, timeout_s=240) == FLOOD
        before = _settled_rss(worker)

        _flood(broker.bootstrap, "flood", FLOOD)
        assert wait_for_rows(engine, 2 * FLOOD, timeout_s=240) == 2 * FLOOD
        metrics = _get(f"{base}/metrics")
        status = _get(f"{base}/status.json")
        after = _settled_rss(worker)
    finally:
        engine.dispose()
        proc.terminate()
        proc.wait(timeout=60)

    text = metrics.decode()
    models = set(re.findall(r'model="([^"]*)"', text))
    assert models <= {"digits", "diabetes", "minilm", "_unknown"}, sorted(models)[:5]
    assert 'inferlane_results_total{lane="normal",model="_unknown",status="rejected"} 20000.0' in (
        text
    )
    assert len(metrics) < MAX_METRICS_BYTES, len(metrics)
    assert len(status) < MAX_STATUS_BYTES, len(status)
    assert after <= before * (1 + MAX_RSS_GROWTH), (before, after)
