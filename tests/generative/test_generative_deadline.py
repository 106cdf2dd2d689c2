"""A generative request's deadline, the product's one way to cancel a request, passing
mid-generation through Kafka: the sequence is cut at the next step and ends ``expired``
with its text so far (the chunks streamed before add up to it, the tokens are
generate()'s own), in Kafka and in SQL, while the worker serves on."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from generative_reference import greedy_reference
from sqlalchemy import text

from consumers.client import InferlaneClient
from consumers.contract import InferenceResult, StreamChunk
from storage import make_engine
from tests.e2e.support import settings_for
from worker.facade import Worker
from worker.intake.broker import EmbeddedBroker
from worker.models import ModelRegistry
from worker.models.generative_model import GenerativeModel

STEP_S = 0.04  # every decoding step made at least this slow: 128 tokens take > 5 s
TIMEOUT_MS = 2000
PROMPT = "Permission is hereby granted"


def _stream(client: InferlaneClient, rid: str) -> tuple[list[StreamChunk], InferenceResult]:
    *chunks, result = client.stream(rid, timeout_s=60)
    assert isinstance(result, InferenceResult)
    return [c for c in chunks if isinstance(c, StreamChunk)], result


async def test_a_deadline_mid_generation_ends_expired_with_the_text_so_far(
    tinylm_registry_path: Path, tmp_path: Path
) -> None:
    registry = ModelRegistry.from_toml(tinylm_registry_path)  # its own: it gets slowed
    model = registry.get("tinylm")
    assert isinstance(model, GenerativeModel)
    model.module.register_forward_pre_hook(lambda *_: time.sleep(STEP_S))  # type: ignore[attr-defined]
    url = f"sqlite:///{tmp_path / 'd.db'}"
    inputs: dict[str, Any] = {"prompt": PROMPT, "max_new_tokens": 128, "return_tokens": True}
    with EmbeddedBroker() as broker:
        async with Worker(settings_for(broker.bootstrap, url), registry):
            with InferlaneClient(broker.bootstrap) as client:
                await asyncio.to_thread(client.watch_results)
                warm = {"request_id": "warm", "model": "tinylm", "inputs": PROMPT}
                await asyncio.to_thread(client.publish, [warm])
                await asyncio.to_thread(_stream, client, "warm")  # model loaded, engine made
                late = {"request_id": "late", "model": "tinylm", "inputs": inputs}
                after = {"request_id": "after", "model": "tinylm", "inputs": PROMPT}
                await asyncio.to_thread(client.publish, [{**late, "timeout_ms": TIMEOUT_MS}])
                await asyncio.to_thread(client.publish, [after])
                chunks, result = await asyncio.to_thread(_stream, client, "late")
                _, served = await asyncio.to_thread(_stream, client, "after")

    assert result.status == "expired" and result.error is not None
    assert result.error.code == "expired"
    outputs = result.outputs
    assert isinstance(outputs, dict) and outputs["finish_reason"] == "expired"
    n = outputs["generated_tokens"]
    assert isinstance(n, int) and 0 < n < 128, n  # cut mid-generation
    reference = greedy_reference(model, model.generative_adapter.prepare(inputs))
    assert outputs["token_ids"] == reference[:n]  # the tokens it would have given
    assert outputs["text"] and "".join(c.text for c in chunks) == outputs["text"]
    assert served.status == "ok"  # the worker serves on

    engine = make_engine(url)
    with engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT r.status, r.error_code, g.finish_reason, g.text, g.generated_tokens"
                " FROM inference_results r JOIN generations g USING (request_id)"
                " WHERE request_id = 'late'"
            )
        ).one()
    engine.dispose()
    assert tuple(row) == ("expired", "expired", "expired", outputs["text"], n)
