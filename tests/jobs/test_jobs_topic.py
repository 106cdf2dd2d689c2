"""Re-score a time range of a request topic and report how outputs differ from the stored ones."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import orjson
from sqlalchemy import text
from typer.testing import CliRunner

from consumers.client import InferlaneClient
from storage import make_engine
from storage.jobs import JobStore
from tests.e2e.support import settings_for, wait_for_rows
from worker.cli import app
from worker.demo.workload import digits_requests
from worker.facade import Worker
from worker.intake.broker import EmbeddedBroker
from worker.models import ModelRegistry

N = 300


async def test_a_topic_range_is_rescored_and_compared_with_stored_results(
    broker: EmbeddedBroker, tmp_path: Path, demo_registry: ModelRegistry, demo_registry_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 't.db'}"
    settings = settings_for(broker.bootstrap, url)
    engine = make_engine(url)
    async with Worker(settings, demo_registry):
        with InferlaneClient(broker.bootstrap) as client:
            await asyncio.to_thread(client.publish, digits_requests(N, prefix="early"))
            await asyncio.to_thread(wait_for_rows, engine, N)
            since = datetime.now(UTC)
            await asyncio.to_thread(client.publish, digits_requests(N, prefix="late"))
            assert await asyncio.to_thread(wait_for_rows, engine, 2 * N) == 2 * N
    # Pretend an older model version answered 7 of the late requests differently.
    with engine.begin() as conn:
        for i in range(7):
            stored = conn.execute(
                text("SELECT outputs FROM inference_results WHERE request_id = :r"),
                {"r": f"late-{i}"},
            ).scalar_one()
            outputs = orjson.loads(stored) if isinstance(stored, str) else stored
            outputs["label"] = (outputs["label"] + 1) % 10
            conn.execute(
                text("UPDATE inference_results SET outputs = :o WHERE request_id = :r"),
                {"o": orjson.dumps(outputs).decode(), "r": f"late-{i}"},
            )

    output = tmp_path / "rescore.parquet"
    args = [
        "score", "--model", "digits", "--from-topic", settings.topics.normal,
        "--from-time", since.strftime("%Y-%m-%dT%H:%M:%S.%f"), "--output", str(output),
        "--database", url, "--bootstrap", broker.bootstrap, "--job", "rescore",
        "--models", str(demo_registry_path),
    ]  # fmt: skip
    result = await asyncio.to_thread(CliRunner().invoke, app, args)
    assert result.exit_code == 0, result.output

    job = JobStore(engine).get("rescore")
    assert job is not None and job.state == "done" and job.checkpoint == N
    assert "300 rows, 7 changed" in " ".join(result.output.split())
    changed = [
        orjson.loads(line)
        for line in (tmp_path / "rescore.parquet.diff.jsonl").read_bytes().splitlines()
    ]
    assert sorted(c["request_id"] for c in changed) == sorted(f"late-{i}" for i in range(7))
    engine.dispose()
