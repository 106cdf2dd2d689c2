"""Bad input of every kind ends as a dead letter (and a rejected result when the id is
known); good traffic in the same stream is unaffected and the worker keeps serving."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from consumers.client import InferlaneClient
from consumers.contract import DeadLetterHeaders, Status
from storage import make_engine, result_counts
from worker.demo.workload import digits_requests
from worker.facade import Worker
from worker.intake.broker import EmbeddedBroker
from worker.models import ModelRegistry
from worker.settings import KafkaConfig

from .poison import POISON
from .support import read_topic, settings_for, wait_for_rows, with_test_model

LIMIT = 64 * 1024  # max_message_bytes for these tests
DIGIT = [0.0] * 64

# (key, value, expected error code, whether a rejected result is due)
BAD: list[tuple[bytes | None, bytes, str, bool]] = [
    (
        b"bad-json",
        b'{"request_id": "bad-json", "model": "digits", "inputs": [1,',
        "bad_record",
        True,
    ),
    (None, b"\xff\xfe\xfa not utf-8", "bad_record", False),
    (None, b"[1, 2, 3]", "bad_record", False),
    (b"bad-missing", b'{"request_id": "bad-missing"}', "bad_record", True),
    (None, b'{"request_id": "", "model": "digits", "inputs": [1]}', "bad_record", False),
    (
        b"bad-empty-model",
        b'{"request_id": "bad-empty-model", "model": "", "inputs": [1]}',
        "bad_record",
        True,
    ),
    (
        b"bad-model",
        b'{"request_id": "bad-model", "model": "nope", "inputs": [1]}',
        "unknown_model",
        True,
    ),
    (
        b"bad-shape",
        b'{"request_id": "bad-shape", "model": "digits", "inputs": [1, 2, 3]}',
        "bad_input",
        True,
    ),
    (
        b"bad-type",
        b'{"request_id": "bad-type", "model": "digits", "inputs": "seven"}',
        "bad_input",
        True,
    ),
    (
        b"bad-nan",
        b'{"request_id": "bad-nan", "model": "digits", "inputs": [NaN]}',
        "bad_record",
        True,
    ),
    (
        b"bad-inf",
        b'{"request_id": "bad-inf", "model": "diabetes", "inputs": [1e999]}',
        "bad_record",
        True,
    ),
    (
        b"bad-big",
        orjson.dumps(
            {"request_id": "bad-big", "model": "digits", "inputs": DIGIT, "pad": "x" * LIMIT}
        ),
        "payload_too_large",
        True,
    ),
    (
        b"bad-text",
        b'{"request_id": "bad-text", "model": "minilm", "inputs": ""}',
        "bad_input",
        True,
    ),
]


async def test_bad_records_are_dead_lettered_and_good_ones_served(
    broker: EmbeddedBroker, tmp_path: Path, demo_registry: ModelRegistry
) -> None:
    url = f"sqlite:///{tmp_path / 'bad.db'}"
    settings = settings_for(broker.bootstrap, url, kafka=KafkaConfig(max_message_bytes=LIMIT))
    good = digits_requests(120)
    async with Worker(settings, demo_registry):
        with InferlaneClient(broker.bootstrap) as client:
            await asyncio.to_thread(client.watch_results)
            ids = await asyncio.to_thread(client.publish, good[:60])
            for key, value, _, _ in BAD:
                client.send_raw(value, key=key)
            ids += await asyncio.to_thread(client.publish, good[60:])
            rejected_ids = [k.decode() for k, _, _, due in BAD if due and k]
            results = await asyncio.to_thread(client.results, ids + rejected_ids, timeout_s=90)
        dead = await asyncio.to_thread(
            read_topic, broker.bootstrap, settings.topics.dead_letters, len(BAD)
        )

    assert all(results[i].status == Status.OK for i in ids)
    for rid in rejected_ids:
        assert results[rid].status == Status.REJECTED
        assert results[rid].error is not None and results[rid].error.message
    assert len(dead) == len(BAD)
    by_value = {d.value: dict(d.headers) for d in dead}
    for key, value, code, _ in BAD:
        headers = by_value.get(value)  # the original bytes, untouched
        assert headers is not None, f"no dead letter carries the bytes of {key!r}"
        assert headers[DeadLetterHeaders.CODE].decode() == code
        assert headers[DeadLetterHeaders.MESSAGE]
        assert headers[DeadLetterHeaders.TOPIC].decode() == settings.topics.normal
        assert int(headers[DeadLetterHeaders.OFFSET]) >= 0
    engine = make_engine(url)
    try:
        assert wait_for_rows(engine, len(ids) + len(rejected_ids)) == len(ids) + len(rejected_ids)
        assert result_counts(engine) == {"ok": len(ids), "rejected": len(rejected_ids)}
    finally:
        engine.dispose()


async def test_a_record_too_large_to_carry_back_keeps_its_reason_not_its_bytes(
    broker: EmbeddedBroker, tmp_path: Path, demo_registry: ModelRegistry
) -> None:
    settings = settings_for(
        broker.bootstrap,
        f"sqlite:///{tmp_path / 'huge.db'}",
        kafka=KafkaConfig(max_message_bytes=LIMIT),
    )
    huge = b'{"request_id": "huge", "pad": "' + b"x" * (3 * LIMIT) + b'"}'
    async with Worker(settings, demo_registry):
        with InferlaneClient(broker.bootstrap) as client:
            await asyncio.to_thread(client.watch_results)
            client.send_raw(huge, key=b"huge")
            client.flush()
            results = await asyncio.to_thread(client.results, ["huge"], timeout_s=60)
        dead = await asyncio.to_thread(
            read_topic, broker.bootstrap, settings.topics.dead_letters, 1
        )

    assert results["huge"].status == Status.REJECTED
    [letter] = dead
    headers = dict(letter.headers)
    assert letter.value is None
    assert headers[DeadLetterHeaders.CODE] == b"payload_too_large"
    assert int(headers[DeadLetterHeaders.VALUE_OMITTED]) == len(huge)


async def test_a_model_that_raises_fails_only_the_poison_requests(
    broker: EmbeddedBroker, tmp_path: Path, demo_registry_path: Path
) -> None:
    registry = with_test_model(demo_registry_path, tmp_path, "e2e.poison:build")
    requests = [
        {
            "request_id": f"p-{i}",
            "model": "poison",
            "inputs": [POISON if i % 10 == 3 else float(i), 1.0, 2.0, 3.0],
        }
        for i in range(40)
    ]
    settings = settings_for(broker.bootstrap, f"sqlite:///{tmp_path / 'p.db'}")
    async with Worker(settings, registry):
        with InferlaneClient(broker.bootstrap) as client:
            await asyncio.to_thread(client.watch_results)
            ids = await asyncio.to_thread(client.publish, requests)
            results = await asyncio.to_thread(client.results, ids, timeout_s=60)
        dead = await asyncio.to_thread(
            read_topic, broker.bootstrap, settings.topics.dead_letters, 4
        )

    poisoned = {f"p-{i}" for i in range(40) if i % 10 == 3}
    for rid, result in results.items():
        if rid in poisoned:
            assert result.status == Status.ERROR and result.error is not None
            assert result.error.code == "model_error" and "poison" in result.error.message
        else:
            assert result.status == Status.OK and isinstance(result.outputs, float)
    assert {d.key.decode() for d in dead} == poisoned
