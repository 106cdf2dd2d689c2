"""A client we did not write (confluent-kafka, librdkafka) publishes and reads results."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from consumers.contract import InferenceResult, Status
from worker.demo.workload import diabetes_requests
from worker.facade import Worker
from worker.intake.broker import EmbeddedBroker
from worker.models import ModelRegistry

from .support import settings_for


def publish_with_librdkafka(bootstrap: str, topic: str, values: list[tuple[bytes, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False})
    for key, value in values:
        producer.produce(topic, value=value, key=key)
    assert producer.flush(30) == 0


def read_with_librdkafka(bootstrap: str, topic: str, partitions: int, n: int) -> list[bytes]:
    # Assigned partitions, no group: librdkafka's group join takes tens of seconds here.
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "interop-reader", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(values) < n and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


async def test_confluent_kafka_publishes_and_reads_results(
    broker: EmbeddedBroker, tmp_path: Path, demo_registry: ModelRegistry
) -> None:
    requests = diabetes_requests(30)
    settings = settings_for(broker.bootstrap, f"sqlite:///{tmp_path / 'i.db'}")
    values = [(r.request_id.encode(), r.model_dump_json().encode()) for r in requests]
    async with Worker(settings, demo_registry):
        await asyncio.to_thread(
            publish_with_librdkafka, broker.bootstrap, settings.topics.normal, values
        )
        raw = await asyncio.to_thread(
            read_with_librdkafka,
            broker.bootstrap,
            settings.topics.results,
            settings.topics.partitions,
            len(requests),
        )
    results = {r.request_id: r for r in map(InferenceResult.model_validate_json, raw)}
    assert set(results) == {r.request_id for r in requests}
    assert all(r.status == Status.OK and isinstance(r.outputs, float) for r in results.values())
