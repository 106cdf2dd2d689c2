"""Helpers for end-to-end tests: settings per test, SQL polling, reading topics."""

from __future__ import annotations

import importlib
import time
import uuid
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from safetensors.torch import save_file
from sqlalchemy import Engine

from consumers.client import READER_CONFIG, read_to_end
from storage import count_results
from worker.models import ModelRegistry, ModelSpec, RegistryFile
from worker.settings import KafkaConfig, WorkerSettings


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


def with_test_model(
    demo_registry_path: Path, folder: Path, factory: str, **spec: Any
) -> ModelRegistry:
    """The demo models plus a 4-feature regressor built by ``factory`` ("module:build"),
    its weights saved as safetensors in ``folder``; ``spec`` adds or overrides fields."""
    name = spec.pop("name", factory.rpartition(".")[2].split(":")[0])
    module_name, _, attr = factory.partition(":")
    build = getattr(importlib.import_module(module_name), attr)
    weights = folder / f"{name}.safetensors"
    save_file(build().state_dict(), str(weights))
    extra = ModelSpec.model_validate(
        {
            "name": name,
            "version": "1",
            "format": "factory",
            "path": weights,
            "factory": factory,
            "adapter": {"kind": "regressor", "features": 4},
            **spec,
        }
    )
    return ModelRegistry([*RegistryFile.from_toml(demo_registry_path).models, extra])
