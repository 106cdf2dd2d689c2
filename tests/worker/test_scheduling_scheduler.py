"""The Scheduler object: controllers ticked from finished batches; late and expired counts."""

from __future__ import annotations

import random

from pipeline_factories import pending
from prometheus_client import CollectorRegistry

from consumers.contract import Priority
from worker.base.pending import Batch, BatchRun, ItemResult
from worker.models import ModelRegistry
from worker.scheduling.controller import START_CAP, Policy
from worker.scheduling.lanes import Lanes
from worker.scheduling.scheduler import Scheduler
from worker.settings import SchedulingConfig


def make(
    registry: ModelRegistry,
    now: list[float],
    metrics: CollectorRegistry | None = None,
    policy: Policy | None = None,
    **config: object,
) -> tuple[Scheduler, Lanes]:
    lanes = Lanes(capacity=100_000)
    scheduler = Scheduler(
        SchedulingConfig.model_validate(config),
        registry,
        lanes,
        max_batch=256,
        metrics=metrics or CollectorRegistry(),
        clock=lambda: now[0],
        policy=policy,
    )
    return scheduler, lanes


def run_of(batch: Batch, started_s: float, compute_s: float) -> BatchRun:
    return BatchRun([ItemResult() for _ in batch.items], "v", started_s, compute_s)


def test_results_computed_after_their_deadline_count_as_late(
    demo_registry: ModelRegistry,
) -> None:
    metrics = CollectorRegistry()
    scheduler = Scheduler(
        SchedulingConfig(), demo_registry, Lanes(10), max_batch=8, metrics=metrics
    )
    on_time = pending("digits", lane=Priority.LOW, deadline_s=10.0)
    late = pending("digits", lane=Priority.LOW, deadline_s=1.5)
    batch = Batch("digits", [on_time, late], formed_s=1.0)
    scheduler.finished(batch, run_of(batch, 1.0, 1.0))
    scheduler.expired([pending("digits", lane=Priority.HIGH)])
    labels = {"model": "digits", "lane": "low"}
    assert metrics.get_sample_value("inferlane_late_total", labels) == 1
    assert metrics.get_sample_value("inferlane_expired_total", labels | {"lane": "high"}) == 1


def test_a_backlogged_busy_device_does_not_walk_the_cap_down(
    demo_registry: ModelRegistry,
) -> None:
    now = [0.0]
    metrics = {"adaptive": CollectorRegistry(), "naive": CollectorRegistry()}
    adaptive, lanes = make(demo_registry, now, metrics["adaptive"], policy="adaptive")
    naive, naive_lanes = make(demo_registry, now, metrics["naive"], policy="naive")
    for queue in (lanes, naive_lanes):
        for _ in range(10_000):
            queue.push(pending("digits"))
    for _ in range(200):  # back-to-back 150 ms batches: busy, with a backlog
        for scheduler in (adaptive, naive):
            size = scheduler.limit("digits", Priority.NORMAL)
            batch = Batch("digits", [pending("digits") for _ in range(size)], now[0])
            scheduler.finished(batch, run_of(batch, now[0], 0.150))
        now[0] += 0.150
    assert naive.limit("digits", Priority.NORMAL) == 1
    assert adaptive.limit("digits", Priority.NORMAL) >= START_CAP
    # Each tick's reason is counted: the naive rule shrank on "busy", adaptive never did.
    reasons = {
        policy: {
            s.labels["reason"]: s.value
            for family in registry.collect()
            for s in family.samples
            if s.name == "inferlane_batch_cap_decisions_total"
        }
        for policy, registry in metrics.items()
    }
    assert reasons["naive"].get("busy", 0) > 0
    assert "busy" not in reasons["adaptive"]
    assert sum(reasons["adaptive"].values()) == sum(reasons["naive"].values()) > 0


def test_a_text_models_sizes_compare_on_tokens_per_second(
    demo_registry: ModelRegistry,
) -> None:
    """minilm under a backlog, every size at 5,000 tokens/s. Batches at the model's cap
    (64) happen to hold 40-token texts, any other size's 8-token texts (a length-grouped
    batch is one band of lengths). In items/s the trips' batches run five times faster
    and would take the cap; the scheduler gives its curve each batch's tokens (the
    items' ``cost``), and the cap stays at 64."""
    rng, now = random.Random(3), [0.0]
    scheduler, lanes = make(demo_registry, now)
    for _ in range(1000):
        lanes.push(pending("minilm"))
    caps = set()
    while now[0] < 60:
        size = scheduler.limit("minilm", Priority.NORMAL)
        tokens = 40 if size == 64 else 8
        batch = Batch("minilm", [pending("minilm", cost=tokens) for _ in range(size)], now[0])
        took = size * tokens / (5000 * rng.gauss(1.0, 0.03))
        scheduler.finished(batch, run_of(batch, now[0], took))
        now[0] += took
        caps.add(size)
    assert len(caps) > 2  # trips were taken
    assert scheduler.limit("minilm", Priority.NORMAL) == 64


def test_each_lane_is_cut_to_its_own_latency_target_from_the_curve(
    demo_registry: ModelRegistry,
) -> None:
    """5 ms per item: the high lane's 100 ms target allows about 20 items, the normal lane
    (no target) keeps the model's cap, and a low lane with 50 ms about 10."""
    now = [0.0]
    scheduler, _ = make(
        demo_registry, now, high_latency_target_ms=100, low_latency_target_ms=50, slice_ms=None
    )
    for size in (8, 32):
        for _ in range(10):
            batch = Batch("digits", [pending("digits") for _ in range(size)], now[0])
            scheduler.finished(batch, run_of(batch, now[0], 0.005 * size))
            now[0] += 0.005 * size
    cap = scheduler.limit("digits", Priority.NORMAL)
    assert cap >= START_CAP
    assert 16 <= scheduler.limit("digits", Priority.HIGH) <= 20 < cap
    assert 8 <= scheduler.limit("digits", Priority.LOW) <= 10


def _low_beside_high(scheduler: Scheduler, now: list[float], periods: range) -> None:
    """Each 100 ms: a low batch busy 70 ms on its thread, and beside it five 5-ms high
    batches of one on theirs (no backlog queued: utilization decides). Each batch is
    reported when it ends, as the executor does."""
    for period in periods:
        start = period * 0.100
        size = scheduler.limit("digits", Priority.LOW)
        items = [pending("digits", lane=Priority.LOW) for _ in range(size)]
        low = Batch("digits", items, start, lane=Priority.LOW)
        runs = [(low, start, 0.070)]
        for i in range(5):
            one = [pending("digits", lane=Priority.HIGH)]
            high = Batch("digits", one, start + i * 0.02, lane=Priority.HIGH)
            runs.append((high, start + i * 0.02, 0.005))
        for batch, started, seconds in sorted(runs, key=lambda r: r[1] + r[2]):
            now[0] = started + seconds
            scheduler.finished(batch, run_of(batch, started, seconds))


def test_high_batches_on_their_own_thread_do_not_count_as_the_bulk_threads_load(
    demo_registry: ModelRegistry,
) -> None:
    # Summed, 70% + 25% reads as busy (above max_util 80%) and the bulk cap shrinks;
    # where lanes compute apart, the busiest lane's 70% is steady.
    caps = {}
    for apart in (True, False):
        now = [0.0]
        lanes = Lanes(capacity=100)
        scheduler = Scheduler(
            SchedulingConfig(),
            demo_registry,
            lanes,
            max_batch=256,
            metrics=CollectorRegistry(),
            clock=lambda now=now: now[0],
            slices=not apart,
            lanes_apart=apart,
        )
        _low_beside_high(scheduler, now, range(30))  # past the probe's 2-s window
        before = scheduler.limit("digits", Priority.LOW)
        _low_beside_high(scheduler, now, range(30, 80))
        caps[apart] = (before, scheduler.limit("digits", Priority.LOW))
    before, after = caps[True]
    assert after == before
    before, after = caps[False]
    assert after < before / 2
