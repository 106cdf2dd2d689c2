"""Failures stay with the request that caused them, and the worker resumes by itself.

Hostile but well-formed requests, then ordinary ones: each hostile one ends as a result
or a dead letter whose reason names the field or value, every ordinary one is served,
and no stage fails. SQL is the record of what is durable when the worker resumes. A batch
stuck in a model holds a rebalance no longer than its configured bound.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from sqlalchemy import text

from consumers.client import InferlaneClient
from consumers.contract import DeadLetterHeaders, Status
from storage import make_engine
from worker.demo.workload import digits_requests
from worker.facade import Worker
from worker.intake.broker import EmbeddedBroker
from worker.models import ModelRegistry
from worker.settings import KafkaConfig, LaneConfig

from .slow import STALL, STALL_S
from .support import read_topic, settings_for, wait_for_rows, with_test_model

LIMIT = 64 * 1024
BIG = 3e38  # within float32, but the models overflow on it

# (request_id or None, value, status, error code, a word the reason must hold)
HOSTILE: list[tuple[str | None, dict[str, Any] | bytes, str, str, str]] = [
    (
        "h-inf-1",
        {"model": "diabetes", "inputs": [BIG] * 10, "expected": 100.0},
        "error",
        "non_finite_output",
        "NaN or Infinity",
    ),
    ("h-inf-2", {"model": "diabetes", "inputs": [-BIG] * 10}, "error", "non_finite_output", "NaN"),
    (
        "h-inf-3",
        {"model": "digits", "inputs": [BIG] * 64, "expected": 3},
        "error",
        "non_finite_output",
        "NaN",
    ),
    (
        None,
        {"request_id": "nul\x00id", "model": "digits", "inputs": [0] * 64},
        "dead",
        "bad_record",
        "request_id",
    ),
    (
        None,
        {"request_id": "i" * 129, "model": "digits", "inputs": [0] * 64},
        "dead",
        "bad_record",
        "request_id",
    ),
    ("h-nul-model", {"model": "digits\x00", "inputs": [0] * 64}, "rejected", "bad_record", "model"),
    ("h-long-model", {"model": "m" * 256, "inputs": [0] * 64}, "rejected", "bad_record", "model"),
    ("h-255-model", {"model": "m" * 255, "inputs": [0] * 64}, "rejected", "unknown_model", "mmm"),
    (
        "h-illegal-reply",
        {"model": "digits", "inputs": [0] * 64, "reply_to": "not a topic!"},
        "rejected",
        "bad_record",
        "reply_to",
    ),
    (
        "h-foreign-reply",
        {"model": "digits", "inputs": [0] * 64, "reply_to": "payments.events"},
        "rejected",
        "reply_to_not_allowed",
        "payments.events",
    ),
    (
        "h-deep",
        b'{"request_id": "h-deep", "model": "digits", "inputs": ' + b"[" * 2000,
        "rejected",
        "bad_record",
        "JSON",
    ),
    (
        "h-overflow",
        b'{"request_id": "h-overflow", "model": "digits", "inputs": [1e400]}',
        "rejected",
        "bad_record",
        "JSON",
    ),
    (
        "h-priority",
        {"model": "digits", "inputs": [0] * 64, "priority": "urgent"},
        "rejected",
        "bad_record",
        "priority",
    ),
    (
        "h-timeout",
        {"model": "digits", "inputs": [0] * 64, "timeout_ms": "5"},
        "rejected",
        "bad_record",
        "timeout_ms",
    ),
    ("h-object", {"model": "digits", "inputs": {"a": [1]}}, "rejected", "bad_input", "inputs"),
    ("h-strings", {"model": "diabetes", "inputs": ["1"] * 10}, "rejected", "bad_input", "strings"),
    (
        "h-bad-label",
        {"model": "digits", "inputs": [0] * 64, "expected": "seven"},
        "rejected",
        "bad_label",
        "class label 0..9",
    ),
    # Hostile, yet servable: these must come back ok.
    ("h-nul-text", {"model": "minilm", "inputs": "a\x00b"}, "ok", "", ""),
    (
        "h-nul-meta",
        {"model": "digits", "inputs": [0] * 64, "metadata": {"k\x00": "v\x00"}},
        "ok",
        "",
        "",
    ),
    # Its result outgrows a Kafka record: the Kafka copy keeps id and status, says why.
    (
        "h-big-result",
        {"model": "minilm", "inputs": "x", "metadata": {"pad": "p" * (LIMIT - 900)}},
        "ok",
        "result_too_large",
        "bytes",
    ),
]


def _value(rid: str | None, body: dict[str, Any] | bytes) -> bytes:
    if isinstance(body, bytes):
        return body
    return orjson.dumps({"request_id": rid, **body} if rid else body)


async def test_hostile_requests_stay_local_and_ordinary_ones_after_them_are_served(
    broker: EmbeddedBroker, db_url: str, demo_registry: ModelRegistry
) -> None:
    settings = settings_for(broker.bootstrap, db_url, kafka=KafkaConfig(max_message_bytes=LIMIT))
    ordinary = digits_requests(300, prefix="ordinary")
    answered = [rid for rid, *_ in HOSTILE if rid is not None]
    async with Worker(settings, demo_registry) as worker:
        with InferlaneClient(broker.bootstrap) as client:
            await asyncio.to_thread(client.watch_results)
            for rid, body, *_ in HOSTILE:
                client.send_raw(_value(rid, body), key=rid.encode() if rid else b"\xff\xfe")
            ids = await asyncio.to_thread(client.publish, ordinary)
            results = await asyncio.to_thread(client.results, ids + answered, timeout_s=120)
        with pytest.raises(TimeoutError):  # no stage failed: wait() raises a stage's error
            await asyncio.wait_for(asyncio.shield(worker.wait()), 0.5)
    n_dead = sum(1 for *_, status, _, _ in HOSTILE if status in ("error", "rejected", "dead"))
    dead = await asyncio.to_thread(
        read_topic, broker.bootstrap, settings.topics.dead_letters, n_dead, 60
    )

    assert all(results[i].status == Status.OK for i in ids)
    by_value = {d.value: dict(d.headers) for d in dead}
    for rid, body, status, code, word in HOSTILE:
        if rid is not None:
            result = results[rid]
            assert result.status == status, rid
            if code:
                assert result.error is not None and result.error.code == code, rid
                assert word in result.error.message, (rid, result.error.message)
        if status in ("error", "rejected", "dead"):
            headers = by_value[_value(rid, body)]
            assert headers[DeadLetterHeaders.CODE].decode() == code, rid
            assert word in headers[DeadLetterHeaders.MESSAGE].decode(), rid
    assert len(dead) == n_dead
    engine = make_engine(db_url)
    try:
        total = len(ids) + len(answered)
        assert await asyncio.to_thread(wait_for_rows, engine, total) == total
        with engine.connect() as conn:
            outputs = conn.scalar(
                text(
                    "SELECT COUNT(*) FROM inference_results WHERE request_id = 'h-big-result' "
                    "AND outputs IS NOT NULL"
                )
            )
        assert outputs == 1  # SQL keeps what the Kafka copy had to leave out
    finally:
        engine.dispose()


async def test_sql_is_where_a_restart_resumes_even_when_kafka_committed_further(
    broker: EmbeddedBroker, tmp_path: Path, demo_registry: ModelRegistry
) -> None:
    url = f"sqlite:///{tmp_path / 'lost.db'}"
    settings = settings_for(broker.bootstrap, url)
    requests = digits_requests(90)
    engine = make_engine(url)
    try:
        async with Worker(settings, demo_registry):
            with InferlaneClient(broker.bootstrap) as client:
                await asyncio.to_thread(client.publish, requests)
            assert await asyncio.to_thread(wait_for_rows, engine, 90) == 90
        # A power loss took SQLite's last commits (synchronous=NORMAL): the results and
        # the offsets that went with them, while Kafka kept its commit.
        with engine.begin() as conn:
            conn.execute(text("DELETE FROM inference_results"))
            conn.execute(text("UPDATE consumer_offsets SET next_offset = 0"))
        async with Worker(settings, demo_registry):
            assert await asyncio.to_thread(wait_for_rows, engine, 90, 60) == 90
    finally:
        engine.dispose()


async def test_a_stalled_batch_holds_a_rebalance_no_longer_than_its_bound(
    broker: EmbeddedBroker, tmp_path: Path, demo_registry_path: Path
) -> None:
    registry = with_test_model(demo_registry_path, tmp_path, "e2e.slow:build")
    url = f"sqlite:///{tmp_path / 'r.db'}"
    first = settings_for(broker.bootstrap, url, lanes=LaneConfig(rebalance_drain_s=2.0))
    second = first.model_copy(update={"kafka": KafkaConfig(group_id=first.kafka.group_id)})
    async with Worker(first, registry) as a:
        await _until(lambda: len(a.assignment) == 3 * first.topics.partitions)
        with InferlaneClient(broker.bootstrap) as client:
            await asyncio.to_thread(
                client.publish,
                [{"request_id": "stall", "model": "slow", "inputs": [STALL, 0.0, 0.0, 0.0]}],
            )
        await asyncio.sleep(1.0)  # the stalling batch is in the model now
        started = time.monotonic()
        async with Worker(second, registry) as b:
            # a's revoke waits for its started work at most 2 s, not the 20 s stall.
            await _until(lambda: bool(b.assignment), timeout_s=STALL_S - 2)
            joined_s = time.monotonic() - started
        assert joined_s < STALL_S - 2


async def _until(condition: Callable[[], bool], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.1)
