"""``inferlane run`` serving the generative demo model, killed with SIGKILL three times
mid-stream: every request ends with one SQL row and a result on Kafka, and a replayed
request streams the same chunks (same seq, same text) and the same tokens."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import orjson
from generative_prompts import prompt
from sqlalchemy import Engine, text

from consumers.client import InferlaneClient
from storage import make_engine, upgrade
from tests.e2e.support import read_topic, wait_for_rows
from worker.intake.broker import EmbeddedBroker

N = 240
KILLS = 3


def _start(bootstrap: str, db: Path, registry: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "worker", "run", "--bootstrap", bootstrap]
    command += ["--database", f"sqlite:///{db}", "--models", str(registry), "--http-port", "0"]
    return subprocess.Popen(
        command, env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def _rows(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT COUNT(*) FROM generations")).scalar_one())


def test_three_kills_mid_stream_lose_and_duplicate_nothing(
    broker: EmbeddedBroker,
    tmp_path: Path,
    tinylm_registry_path: Path,
    workers: list[subprocess.Popen[bytes]],
) -> None:
    rng = random.Random(4)
    requests = [
        {
            "request_id": f"k{i}",
            "model": "tinylm",
            "inputs": {
                "prompt": prompt(rng),
                "max_new_tokens": rng.randint(64, 128),
                "temperature": 0.8 if i % 2 else 0.0,
                "seed": i,
                "return_tokens": True,
            },
        }
        for i in range(N)
    ]
    with InferlaneClient(broker.bootstrap) as client:
        client.publish(requests)
    db = tmp_path / "g.db"
    engine = make_engine(f"sqlite:///{db}")
    upgrade(engine)  # the tables exist before the first worker has started
    try:
        for kill in range(KILLS):
            workers.append(_start(broker.bootstrap, db, tinylm_registry_path))
            target = (kill + 1) * N // (KILLS + 2)
            deadline = time.monotonic() + 120
            while _rows(engine) < target and time.monotonic() < deadline:
                assert workers[-1].poll() is None, "the worker exited"
                time.sleep(0.05)
            workers[-1].send_signal(signal.SIGKILL)
            workers[-1].wait()
            assert _rows(engine) < N, "the worker finished before it could be killed"
        workers.append(_start(broker.bootstrap, db, tinylm_registry_path))
        assert wait_for_rows(engine, N, timeout_s=180) == N
        with engine.connect() as conn:
            ids = {row[0] for row in conn.execute(text("SELECT request_id FROM generations"))}
    finally:
        engine.dispose()
    assert ids == {r["request_id"] for r in requests}

    chunks: dict[str, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
    finals: dict[str, list[dict[str, object]]] = defaultdict(list)
    for record in read_topic(broker.bootstrap, "inferlane.results", timeout_s=60):
        value = orjson.loads(record.value)
        if value.get("kind") == "chunk":
            chunks[value["request_id"]][value["seq"]].add(value["text"])
        else:
            finals[value["request_id"]].append(value)
    assert set(finals) == ids  # a result on Kafka for every request
    replayed = 0
    for rid, results in finals.items():
        outputs = [r["outputs"] for r in results]
        assert all(r["status"] == "ok" for r in results)
        # Replays regenerate the same tokens, and the same chunk for each seq.
        assert all(o["token_ids"] == outputs[0]["token_ids"] for o in outputs), rid
        assert all(o["text"] == outputs[0]["text"] for o in outputs), rid
        seqs = chunks[rid]
        assert all(len(texts) == 1 for texts in seqs.values())
        assert sorted(seqs) == list(range(len(seqs)))
        assert "".join(next(iter(seqs[s])) for s in sorted(seqs)) == outputs[0]["text"]  # type: ignore[index]
        replayed += len(results) > 1
    assert replayed > 0  # some finished request was replayed after a kill
