"""A distributed job: rows go out as low-lane requests, two workers share them, every row
ends with exactly one result, and the export writes them in input order."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import orjson
import pyarrow.parquet as pq
from sqlalchemy import text
from typer.testing import CliRunner

from storage import ResultStore
from storage.jobs import JobStore, WindowCounts
from tests.e2e.support import read_topic, settings_for
from worker.cli import app
from worker.facade import Worker
from worker.intake.broker import EmbeddedBroker
from worker.jobs.distributed import ExportError, errors_file, export_job, publish
from worker.jobs.outputs import errors_path
from worker.jobs.params import JobParams
from worker.models import ModelRegistry
from worker.settings import KafkaConfig, TopicConfig

from .files import digits, write_jsonl

N = 3000


async def _until(condition: object, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.1)


def consumed(worker: Worker) -> float:
    return sum(
        s.value
        for m in worker.metrics.records.collect()
        for s in m.samples
        if s.name.endswith("_total")
    )


async def test_two_workers_share_a_distributed_job_and_each_row_is_scored_once(
    broker: EmbeddedBroker, tmp_path: Path, demo_registry: ModelRegistry
) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", N)
    with source.open("ab") as f:  # one bad row at the end: row N
        f.write(orjson.dumps({"id": "bad", "inputs": [1, 2, 3], "label": 1}) + b"\n")
    url = f"sqlite:///{tmp_path / 'd.db'}"
    first = settings_for(broker.bootstrap, url)
    second = first.model_copy(update={"kafka": KafkaConfig(group_id=first.kafka.group_id)})
    params = JobParams(
        model="digits", input=source, id_column="id", label_column="label", window_rows=1000
    )
    with ResultStore(url) as store:
        jobs = JobStore(store.engine)
        async with Worker(first, demo_registry) as a, Worker(second, demo_registry) as b:
            await _until(lambda: a.assignment and b.assignment)
            record = await asyncio.to_thread(
                publish, "dj", params, demo_registry, store, broker.bootstrap, settings=first
            )
            assert record.state == "published" and record.errors == 1
            await _until(lambda: sum(jobs.result_counts("dj").values()) >= N + 1)
            assert consumed(a) > 0 and consumed(b) > 0

        assert jobs.result_counts("dj") == {"ok": N, "rejected": 1}
        with store.engine.connect() as conn:
            total, distinct = conn.execute(
                text("SELECT COUNT(*), COUNT(DISTINCT request_id) FROM inference_results")
            ).one()
            drift = conn.execute(text("SELECT COUNT(*) FROM inference_log")).scalar_one()
        assert (total, distinct, drift) == (N + 1, N + 1, N)
        assert b"shape" in errors_file("dj", params).read_bytes()

        shown = CliRunner().invoke(app, ["jobs", "show", "dj", "--database", url])
        assert "complete yes" in " ".join(re.sub(r"[\u2500-\u257f]", " ", shown.output).split())
        output = tmp_path / "out.parquet"
        assert export_job("dj", store, output) == N
    table = pq.read_table(output)
    assert table.column("row").to_pylist() == list(range(N))
    assert table.column("id").to_pylist() == [f"id-{i}" for i in range(N)]
    model = demo_registry.get("digits")
    labels = [o["label"] for o in model.run(list(digits(N)[0]))]  # type: ignore[index]
    assert table.column("predicted_label").to_pylist() == labels
    assert orjson.loads(errors_path(output).read_bytes())["row"] == N


def test_an_unfinished_job_is_not_exported(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'd.db'}"
    params = JobParams(model="digits", input=write_jsonl(tmp_path / "in.jsonl", 5))
    with ResultStore(url) as store:
        JobStore(store.engine).create(
            "half", kind="distributed", model="digits", params=params.stored(), rows_total=5
        )
        try:
            export_job("half", store, tmp_path / "o.parquet")
        except ExportError as exc:
            assert "0 of 5" in str(exc)
        else:
            raise AssertionError("an unfinished job was exported")
    assert not (tmp_path / "o.parquet").exists()


def test_a_resumed_publish_sends_each_row_after_the_checkpoint_once(
    broker: EmbeddedBroker, tmp_path: Path, demo_registry: ModelRegistry
) -> None:
    """As after a crash once the first window was acknowledged: the rerun sends the rest,
    each row once, keyed by request id (Kafka's partitioner spreads them)."""
    source = write_jsonl(tmp_path / "in.jsonl", 2500)
    url = f"sqlite:///{tmp_path / 'd.db'}"
    settings = settings_for(broker.bootstrap, url).model_copy(
        update={"topics": TopicConfig(low=f"low-{tmp_path.name}", partitions=3)}
    )
    params = JobParams(model="digits", input=source, id_column="id", window_rows=1000)
    with ResultStore(url) as store:
        jobs = JobStore(store.engine)
        jobs.create(
            "rp", kind="distributed", model="digits", params=params.stored(), rows_total=2500
        )
        store.write([], [], [], also=jobs.advance("rp", 0, WindowCounts(1000, 0)))
        record = publish("rp", params, demo_registry, store, broker.bootstrap, settings=settings)
    assert record.state == "published" and record.checkpoint == 2500 and record.errors == 0

    sent = read_topic(broker.bootstrap, settings.topics.low)
    rows = sorted(orjson.loads(r.value)["metadata"]["row"] for r in sent)
    assert rows == list(range(1000, 2500))
    assert all(r.key == f"rp:{orjson.loads(r.value)['metadata']['row']}".encode() for r in sent)
    assert len({r.partition for r in sent}) == 3
