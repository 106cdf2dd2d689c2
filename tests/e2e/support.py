"""Helpers for end-to-end tests: settings per test, SQL polling, reading topics."""

from __future__ import annotations

import time
import uuid
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from sqlalchemy import Engine

from consumers.client import READER_CONFIG, read_to_end
from storage import count_results
from worker.config import KafkaConfig, WorkerSettings


def settings_for(
    bootstrap: str, database_url: str, *, kafka: KafkaConfig | None = None, **overrides: object
) -> WorkerSettings:
    """Settings with a consumer group of the test's own."""
    group = f"test-{uuid.uuid4().hex[:8]}"
    kafka = (kafka or KafkaConfig()).model_copy(update={"group_id": group})
    return WorkerSettings(
        bootstrap=bootstrap,
        database_url=database_url,
        kafka=kafka,
        **overrides,  # type: ignore[arg-type]
    )


def wait_for_rows(engine: Engine, n: int, timeout_s: float = 60.0) -> int:
    """Poll until ``inference_results`` holds ``n`` rows; return the last count."""
    deadline = time.monotonic() + timeout_s
    count = 0
    while time.monotonic() < deadline:
        count = count_results(engine)
        if count >= n:
            return count
        time.sleep(0.1)
    return count


def read_topic(
    bootstrap: str, topic: str, n: int | None = None, timeout_s: float = 30.0
) -> list[Any]:
    """The first ``n`` records of ``topic`` (all partitions), or fewer at the timeout;
    with ``n`` None, every record up to the high watermarks the fetches report."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **READER_CONFIG)
    try:
        parts = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        if n is None:
            return read_to_end(consumer, tps, timeout_s=timeout_s)
        records: list[Any] = []
        deadline = time.monotonic() + timeout_s
        while len(records) < n and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=200).values():
                records.extend(batch)
        return records
    finally:
        consumer.close()
