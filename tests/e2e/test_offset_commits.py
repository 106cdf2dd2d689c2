"""The group's offsets in Kafka, committed at most once per interval, are the durable ones
once the worker stops: a commit held back by the interval is not lost (real broker)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition

from consumers.client import InferlaneClient
from storage import ResultStore, make_engine
from worker.demo.workload import digits_requests
from worker.facade import Worker
from worker.intake.broker import EmbeddedBroker
from worker.models import ModelRegistry
from worker.settings import KafkaConfig, WorkerSettings

from .support import settings_for, wait_for_rows


async def _kafka_offsets(settings: WorkerSettings) -> dict[tuple[str, int], int]:
    """The group's committed offsets on the normal topic, as Kafka holds them."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap,
        group_id=settings.kafka.group_id,
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        topic = settings.topics.normal
        found = {}
        for p in range(settings.topics.partitions):
            offset = await consumer.committed(TopicPartition(topic, p))
            if offset is not None:
                found[(topic, p)] = offset
        return found
    finally:
        await consumer.stop()


async def test_offsets_held_back_by_the_interval_are_committed_when_the_worker_stops(
    broker: EmbeddedBroker, tmp_path: Path, demo_registry: ModelRegistry
) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    # Longer than the test: after the first commit, the rest wait for the stop.
    settings = settings_for(broker.bootstrap, url, kafka=KafkaConfig(commit_interval_ms=600_000))
    requests = digits_requests(120)
    engine = make_engine(url)
    store = ResultStore(url)
    try:
        async with Worker(settings, demo_registry):
            with InferlaneClient(broker.bootstrap) as client:
                await asyncio.to_thread(client.publish, requests[:30])
                assert await asyncio.to_thread(wait_for_rows, engine, 30) == 30
                await asyncio.to_thread(client.publish, requests[30:])
            assert await asyncio.to_thread(wait_for_rows, engine, 120) == 120
            durable = store.committed_offsets(settings.kafka.group_id)
            assert sum(durable.values()) == 120
            held = await _kafka_offsets(settings)
            assert sum(held.values()) < 120  # the interval holds the later commits back
        assert await _kafka_offsets(settings) == durable
    finally:
        store.close()
        engine.dispose()


async def test_a_short_interval_keeps_kafka_current_while_the_worker_runs(
    broker: EmbeddedBroker, tmp_path: Path, demo_registry: ModelRegistry
) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    settings = settings_for(broker.bootstrap, url, kafka=KafkaConfig(commit_interval_ms=50))
    engine = make_engine(url)
    store = ResultStore(url)
    try:
        async with Worker(settings, demo_registry):
            with InferlaneClient(broker.bootstrap) as client:
                await asyncio.to_thread(client.publish, digits_requests(60))
            assert await asyncio.to_thread(wait_for_rows, engine, 60) == 60
            durable = store.committed_offsets(settings.kafka.group_id)
            for _ in range(100):  # the next commit is due within 50 ms of the last write
                if await _kafka_offsets(settings) == durable:
                    break
                await asyncio.sleep(0.1)
            assert await _kafka_offsets(settings) == durable
    finally:
        store.close()
        engine.dispose()
