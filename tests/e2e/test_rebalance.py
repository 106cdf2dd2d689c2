"""A second worker joins the group mid-stream: partitions move, nothing is lost or doubled."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from consumers.client import InferlaneClient
from storage import make_engine, result_counts
from worker.demo.workload import digits_requests
from worker.facade import Worker
from worker.intake.broker import EmbeddedBroker
from worker.models import ModelRegistry
from worker.settings import KafkaConfig

from .support import settings_for, wait_for_rows


async def _until(condition: object, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.1)


async def test_partitions_move_to_a_joining_worker_without_loss(
    broker: EmbeddedBroker, tmp_path: Path, demo_registry: ModelRegistry
) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    first = settings_for(broker.bootstrap, url)
    # Same group for both: that is what makes them share the partitions.
    second = first.model_copy(update={"kafka": KafkaConfig(group_id=first.kafka.group_id)})
    before, after = digits_requests(3000, prefix="before"), digits_requests(3000, prefix="after")
    engine = make_engine(url)
    try:
        async with Worker(first, demo_registry) as a:
            with InferlaneClient(broker.bootstrap) as client:
                await asyncio.to_thread(client.publish, before)
                await _until(lambda: len(a.assignment) == 3 * first.topics.partitions)
                async with Worker(second, demo_registry) as b:
                    # Both hold a share once the rebalance is through.
                    await _until(lambda: a.assignment and b.assignment)
                    assert not a.assignment & b.assignment
                    await asyncio.to_thread(client.publish, after)
                    total = len(before) + len(after)
                    assert await asyncio.to_thread(wait_for_rows, engine, total, 90) == total
                    consumed_by_b = sum(
                        s.value
                        for m in b.metrics.records.collect()
                        for s in m.samples
                        if s.name.endswith("_total")
                    )
        assert consumed_by_b > 0
        assert result_counts(engine) == {"ok": total}
    finally:
        engine.dispose()
