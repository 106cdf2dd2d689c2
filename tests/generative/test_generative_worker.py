"""Generative requests through Kafka: the same tokens as generate() one at a time,
chunks in order before the result, SQL rows, bad input dead-lettered."""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest
from generative_prompts import prompt
from generative_reference import greedy_reference
from sqlalchemy import text

from consumers.client import InferlaneClient
from consumers.contract import DeadLetterHeaders, InferenceResult, StreamChunk
from storage import make_engine
from tests.e2e.support import read_topic, settings_for, wait_for_rows
from worker.facade import Worker
from worker.intake.broker import EmbeddedBroker
from worker.models import ModelRegistry
from worker.models.generative_model import GenerativeModel


def _requests(n: int, seed: int) -> list[dict[str, Any]]:
    """Mixed prompts (2-40 words), outputs (4-64 tokens) and lanes, all greedy; every
    fifth with expected text."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        request: dict[str, Any] = {
            "request_id": f"g{seed}-{i}",
            "model": "tinylm",
            "inputs": {
                "prompt": prompt(rng),
                "max_new_tokens": rng.randint(4, 64),
                "return_tokens": True,
            },
            "priority": rng.choice(["high", "normal", "low"]),
        }
        if i % 5 == 0:
            request["expected"] = "free of charge, to any person obtaining a copy"
        out.append(request)
    return out


def _reference(model: GenerativeModel, request: dict[str, Any]) -> list[int]:
    """The request alone through ``generate()``, greedy."""
    return greedy_reference(model, model.adapter.prepare(request["inputs"]))


def _by_request(bootstrap: str, topic: str) -> dict[str, list[StreamChunk | InferenceResult]]:
    """Every record of the results topic, per request id, in partition order."""
    records: dict[str, list[StreamChunk | InferenceResult]] = defaultdict(list)
    for record in read_topic(bootstrap, topic):
        value = orjson.loads(record.value)
        parsed = StreamChunk.model_validate(value) if value.get("kind") == "chunk" else None
        found = parsed or InferenceResult.model_validate(value)
        records[found.request_id].append(found)
    return records


async def test_greedy_generation_through_kafka_equals_generate(
    tinylm_registry: ModelRegistry, tmp_path: Path
) -> None:
    requests = _requests(100, seed=1)
    url = f"sqlite:///{tmp_path / 'g.db'}"
    with EmbeddedBroker() as broker:
        settings = settings_for(broker.bootstrap, url)
        topics = settings.topics
        lane_topic = {"high": topics.high, "normal": topics.normal, "low": topics.low}
        async with Worker(settings, tinylm_registry):
            with InferlaneClient(broker.bootstrap) as client:
                for r in requests:
                    client.publish([r], topic=lane_topic[r["priority"]])
            engine = make_engine(url)
            done = await asyncio.to_thread(wait_for_rows, engine, len(requests))
            assert done == len(requests)
        records = _by_request(broker.bootstrap, topics.results)
    model = tinylm_registry.get("tinylm")
    assert isinstance(model, GenerativeModel)
    for r in requests:
        *chunks, result = records[r["request_id"]]
        assert isinstance(result, InferenceResult) and result.status == "ok", result
        assert result.outputs["token_ids"] == _reference(model, r), r["request_id"]
        assert all(isinstance(c, StreamChunk) for c in chunks)
        assert [c.seq for c in chunks] == list(range(len(chunks)))  # type: ignore[union-attr]
        assert "".join(c.text for c in chunks) == result.outputs["text"]  # type: ignore[union-attr]
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT request_id, ttft_ms, tpot_ms, generated_tokens, f1 FROM generations")
        ).all()
        labelled = conn.execute(text("SELECT COUNT(*) FROM inference_log")).scalar_one()
        anomalies = conn.execute(
            text("SELECT COUNT(*) FROM inference_log WHERE ABS(output - expected) > 0.5")
        ).scalar_one()
    assert {row.request_id for row in rows} == {r["request_id"] for r in requests}
    assert all(row.ttft_ms > 0 for row in rows)
    assert all(row.tpot_ms > 0 for row in rows if row.generated_tokens > 1)
    assert labelled == sum(1 for r in requests if "expected" in r)
    assert anomalies == sum(1 for row in rows if row.f1 is not None and row.f1 < 0.5)
    engine.dispose()


@pytest.mark.parametrize("db", ["sqlite", "postgresql"])
async def test_bad_input_is_dead_lettered_and_the_worker_keeps_serving(
    tinylm_registry: ModelRegistry, tmp_path: Path, db: str, request: pytest.FixtureRequest
) -> None:
    url = f"sqlite:///{tmp_path / 'g.db'}" if db == "sqlite" else request.getfixturevalue("pg_url")
    bad = {
        "too-long": {"prompt": "Permission is hereby granted " * 200},
        "too-many": {"prompt": "x", "max_new_tokens": 129},
        "hot": {"prompt": "x", "temperature": -0.5},
        "nucleus": {"prompt": "x", "top_p": 0},
        "number": 7,
        "list": {"prompt": ["Permission"]},
    }
    good = {"after": {"prompt": "Permission is hereby granted", "max_new_tokens": 6}}
    with EmbeddedBroker() as broker:
        settings = settings_for(broker.bootstrap, url)
        async with Worker(settings, tinylm_registry):
            with InferlaneClient(broker.bootstrap) as client:
                client.watch_results()
                for rid, inputs in {**bad, **good}.items():
                    client.publish([{"request_id": rid, "model": "tinylm", "inputs": inputs}])
                streamed = await asyncio.to_thread(lambda: list(client.stream("after")))
                results = await asyncio.to_thread(client.results, [*bad, *good])
        letters = read_topic(broker.bootstrap, settings.topics.dead_letters, n=len(bad))
    assert {rid: r.status for rid, r in results.items()} == {
        **dict.fromkeys(bad, "rejected"),
        "after": "ok",
    }
    codes = {
        orjson.loads(m.value).get("request_id")
        if m.value.startswith(b"{")
        else m.key.decode(): dict(m.headers)[DeadLetterHeaders.CODE]
        for m in letters
    }
    assert codes == dict.fromkeys(bad, b"bad_input")
    assert "context of 512" in (
        results["too-long"].error.message if results["too-long"].error else ""
    )
    *chunks, final = streamed
    assert isinstance(final, InferenceResult) and final.outputs["generated_tokens"] == 6
    assert "".join(c.text for c in chunks if isinstance(c, StreamChunk)) == final.outputs["text"]
    engine = make_engine(url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM generations")).scalar_one() == 1
    engine.dispose()
