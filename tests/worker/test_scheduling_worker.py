"""The scheduler inside a real worker: deadlines from the Kafka timestamp, metrics."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from kafka import KafkaProducer

from bench.drift_cost import digits_batch
from consumers.client import InferlaneClient
from consumers.contract import Priority, Status
from worker.demo.workload import digits_requests
from worker.facade import Worker
from worker.intake.broker import EmbeddedBroker
from worker.models import ModelRegistry
from worker.scheduling.lanes import Lanes
from worker.settings import WorkerSettings

TOPIC = "inferlane.requests"


def send_produced_at(bootstrap: str, values: list[tuple[bytes, bytes, int]]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        for key, value, timestamp_ms in values:
            producer.send(TOPIC, value=value, key=key, timestamp_ms=timestamp_ms)
        producer.flush()
    finally:
        producer.close()


async def test_a_replayed_request_keeps_the_timeout_it_had_when_produced(
    broker: EmbeddedBroker, tmp_path: Path, demo_registry: ModelRegistry
) -> None:
    """A record produced 2 min ago with a 1 min timeout (what a restart replays) expires;
    the same request produced now is served."""
    settings = WorkerSettings(
        bootstrap=broker.bootstrap, database_url=f"sqlite:///{tmp_path}/store.db"
    )
    stale, fresh = digits_requests(2, prefix="timed")
    now_ms = int(time.time() * 1000)
    sends = [
        (r.request_id.encode(), r.model_copy(update={"timeout_ms": 60_000}), produced)
        for r, produced in ((stale, now_ms - 120_000), (fresh, now_ms))
    ]
    async with Worker(settings, demo_registry) as worker:
        with InferlaneClient(broker.bootstrap) as client:
            await asyncio.to_thread(client.watch_results)
            values = [(k, r.model_dump_json(exclude_none=True).encode(), t) for k, r, t in sends]
            await asyncio.to_thread(send_produced_at, broker.bootstrap, values)
            ids = [stale.request_id, fresh.request_id]
            results = await asyncio.to_thread(client.results, ids, timeout_s=60)

    assert results[stale.request_id].status == Status.EXPIRED
    assert results[fresh.request_id].status == Status.OK
    expired = worker.metrics.registry.get_sample_value(
        "inferlane_expired_total", {"model": "digits", "lane": "normal"}
    )
    assert expired == 1
    cap = worker.metrics.registry.get_sample_value(
        "inferlane_batch_cap_requests", {"model": "digits"}
    )
    assert cap is not None and 1 <= cap <= 256


async def test_the_high_topic_is_served_on_the_high_lane_one_record_or_a_burst(
    broker: EmbeddedBroker, tmp_path: Path, demo_registry: ModelRegistry
) -> None:
    """The high topic's own reader: a few records are admitted on the event loop, a burst
    on a pool thread; a bad one among them fails alone."""
    settings = WorkerSettings(
        bootstrap=broker.bootstrap, database_url=f"sqlite:///{tmp_path}/store.db"
    )
    high = settings.topics.high
    async with Worker(settings, demo_registry):
        with InferlaneClient(broker.bootstrap) as client:
            await asyncio.to_thread(client.watch_results)
            one = client.publish(digits_requests(1, prefix="one"), topic=high)
            first = await asyncio.to_thread(client.results, one, timeout_s=60)
            unknown = {"request_id": "nope", "model": "no-such-model", "inputs": [0.0]}
            burst = client.publish([*digits_requests(200, prefix="burst"), unknown], topic=high)
            rest = await asyncio.to_thread(client.results, burst, timeout_s=60)

    served = [*first.values(), *(r for r in rest.values() if r.request_id != "nope")]
    assert len(served) == 201
    assert all(r.status == Status.OK and r.priority == Priority.HIGH for r in served)
    assert rest["nope"].status == Status.REJECTED
    assert rest["nope"].error is not None and rest["nope"].error.code == "unknown_model"


async def test_lanes_given_to_the_worker_are_the_ones_it_queues_in(
    broker: EmbeddedBroker, tmp_path: Path, demo_registry: ModelRegistry
) -> None:
    """A benchmark's baseline passes its own (empty) lanes; the worker must keep them,
    not make its default ones (the single-lane baseline once ran with lanes)."""
    settings = WorkerSettings(
        bootstrap=broker.bootstrap, database_url=f"sqlite:///{tmp_path}/store.db"
    )
    lanes = Lanes(64, single_lane=True)
    worker = Worker(settings, demo_registry, lanes=lanes)
    batch, _, _ = digits_batch(3)
    for pending in batch.items:
        lanes.push(pending)
    try:
        assert sum(worker.intake.lane_depths().values()) == 3
    finally:
        await worker.stop(drain=False)
