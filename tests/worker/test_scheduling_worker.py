"""The scheduler inside a real worker: deadlines from the Kafka timestamp, metrics."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from pathlib import Path

from kafka import KafkaProducer

from consumers.client import InferlaneClient
from consumers.contract import Status
from worker.broker import EmbeddedBroker
from worker.config import WorkerSettings
from worker.models import ModelRegistry
from worker.service import Worker
from worker.workload import digits_requests

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


class IntervalSampler:
    """The interpreter's switch interval, sampled from a thread until stopped."""

    def __init__(self) -> None:
        self.seen: set[float] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.0001):
            self.seen.add(round(sys.getswitchinterval(), 6))

    def __enter__(self) -> IntervalSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


async def test_the_switch_interval_is_short_only_while_high_records_are_in_the_worker(
    broker: EmbeddedBroker, tmp_path: Path, demo_registry: ModelRegistry
) -> None:
    settings = WorkerSettings(
        bootstrap=broker.bootstrap, database_url=f"sqlite:///{tmp_path}/store.db"
    )
    before = sys.getswitchinterval()
    short = settings.scheduling.high_switch_interval_s
    assert short is not None and short < before
    async with Worker(settings, demo_registry):
        with InferlaneClient(broker.bootstrap) as client:
            await asyncio.to_thread(client.watch_results)
            for topic, prefix in ((TOPIC, "bulk"), (settings.topics.high, "urgent")):
                with IntervalSampler() as sampler:
                    ids = client.publish(digits_requests(300, prefix=prefix), topic=topic)
                    results = await asyncio.to_thread(client.results, ids, timeout_s=60)
                    assert all(r.status == Status.OK for r in results.values())
                    for _ in range(100):  # put back once the last result is acknowledged
                        if sys.getswitchinterval() == before:
                            break
                        await asyncio.sleep(0.05)
                if prefix == "bulk":
                    assert sampler.seen == {round(before, 6)}
                else:
                    assert sampler.seen == {round(before, 6), round(short, 6)}
    assert sys.getswitchinterval() == before
