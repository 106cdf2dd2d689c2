"""``inferlane results`` reads back what happened to requests, from a real broker and a
running worker: results by id (a rejected request with its dead letter too), the ids not
found, and with ``--follow`` the records that arrive while it runs."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson

from consumers.client import InferlaneClient
from worker.facade import Worker
from worker.intake.broker import EmbeddedBroker
from worker.models import ModelRegistry

from .support import settings_for

GOOD = {"request_id": "r-ok", "model": "diabetes", "inputs": [0.01] * 10}
SHAPE = b'{"request_id": "r-shape", "model": "digits", "inputs": [1, 2, 3]}'
BROKEN = b'{"request_id": "r-json", "model": "digits", "inputs": [1,'


def results_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERLANE_")}
    return subprocess.run(
        [sys.executable, "-m", "worker", "results", *args],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


async def test_results_by_id_with_dead_letters_and_missing_ids(
    broker: EmbeddedBroker, tmp_path: Path, demo_registry: ModelRegistry
) -> None:
    settings = settings_for(broker.bootstrap, f"sqlite:///{tmp_path / 'r.db'}")
    async with Worker(settings, demo_registry):
        with InferlaneClient(broker.bootstrap) as client:
            await asyncio.to_thread(client.watch_results)
            client.publish([GOOD])
            client.send_raw(SHAPE, key=b"r-shape")
            client.send_raw(BROKEN, key=b"r-json")
            client.flush()
            await asyncio.to_thread(client.results, ["r-ok", "r-shape", "r-json"])
        ids = ("r-ok", "r-shape", "r-json", "r-never")
        text = await asyncio.to_thread(results_cli, *ids, "-b", broker.bootstrap, "--timeout", "2")
        as_json = await asyncio.to_thread(results_cli, *ids, "-b", broker.bootstrap, "--json",
                                          "--timeout", "2")  # fmt: skip

    assert text.returncode == 1, text.stderr
    lines = {tuple(line.split()[:3]) for line in text.stdout.splitlines()}
    assert {("r-ok", "ok", "diabetes"), ("r-shape", "rejected", "digits")} <= lines
    assert ("r-shape", "dead", "letter") in lines and ("r-json", "dead", "letter") in lines
    shape_letter = next(x for x in text.stdout.splitlines() if x.startswith("r-shape  dead"))
    assert "bad_input:" in shape_letter and f"from {settings.topics.normal}[" in shape_letter
    assert "not found: r-never" in text.stderr

    entries = [orjson.loads(line) for line in as_json.stdout.splitlines()]
    ok = next(e for e in entries if e["kind"] == "result" and e["request_id"] == "r-ok")
    assert ok["status"] == "ok" and isinstance(ok["outputs"], float)
    letter = next(e for e in entries if e["kind"] == "dead_letter" and e["request_id"] == "r-json")
    assert letter["headers"]["error.code"] == "bad_record" and letter["value"] == BROKEN.decode()
    assert letter["headers"]["source.topic"] == settings.topics.normal
    assert as_json.returncode == 1


async def test_results_follow_prints_what_arrives_until_ctrl_c(
    broker: EmbeddedBroker, tmp_path: Path, demo_registry: ModelRegistry
) -> None:
    settings = settings_for(broker.bootstrap, f"sqlite:///{tmp_path / 'f.db'}")
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERLANE_")}
    async with Worker(settings, demo_registry):
        with InferlaneClient(broker.bootstrap) as client:
            await asyncio.to_thread(client.watch_results)
            client.publish([{**GOOD, "request_id": "before"}])  # already there: not shown
            await asyncio.to_thread(client.results, ["before"])
            with out.open("w") as stdout, err.open("w") as stderr:
                follower = subprocess.Popen(
                    [sys.executable, "-m", "worker", "results", "--follow", "-b", broker.bootstrap],
                    env=env, stdout=stdout, stderr=stderr, text=True,
                )  # fmt: skip
            try:
                await until(lambda: "following" in err.read_text(), err)
                client.publish([{**GOOD, "request_id": "after"}])
                client.send_raw(SHAPE, key=b"r-shape")
                client.flush()
                await until(lambda: len(lines_of(out, "r-shape  ")) == 2, out)
                follower.send_signal(signal.SIGINT)
                assert await asyncio.to_thread(follower.wait, 30) == 0, err.read_text()
            finally:
                if follower.poll() is None:
                    follower.kill()
                    follower.wait()
    shown = out.read_text()
    assert len(lines_of(out, "after  ok  diabetes")) == 1 and "before" not in shown
    assert "r-shape  rejected" in shown and "r-shape  dead letter  bad_input" in shown


async def until(ready: object, log: Path, timeout_s: float = 60) -> None:
    assert callable(ready)
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert time.monotonic() < deadline, log.read_text()
        await asyncio.sleep(0.1)


def lines_of(log: Path, start: str) -> list[str]:
    return [line for line in log.read_text().splitlines() if line.startswith(start)]
