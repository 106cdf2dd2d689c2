"""Slices: while a higher lane is active, low batches are cut to a measured slice, and
the results per item are the same as one unsliced batch gives."""

from __future__ import annotations

import pytest
from pipeline_factories import record
from prometheus_client import CollectorRegistry

from consumers.contract import InferenceRequest, Priority
from worker.base.pending import Batch, BatchRun, ItemResult, Pending
from worker.demo.workload import digits_requests
from worker.execution.executor import run_batch
from worker.models import ModelRegistry
from worker.scheduling.batcher import Batcher
from worker.scheduling.lanes import LANE_ORDER, Lanes
from worker.scheduling.scheduler import Scheduler
from worker.settings import BatchConfig, SchedulingConfig

MODEL = "digits"


def as_pending(registry: ModelRegistry, request: InferenceRequest, lane: Priority) -> Pending:
    adapter = registry.adapter(request.model)
    item = adapter.prepare(request.inputs)
    return Pending(request, item, adapter.cost(item), lane, record(received_s=0.0), None)


def measure_slices(scheduler: Scheduler, registry: ModelRegistry) -> None:
    """Three batches measured: 8 items in 8 ms, so a 10 ms slice holds 10 items."""
    eight = [as_pending(registry, r, Priority.LOW) for r in digits_requests(8)]
    for _ in range(3):
        scheduler.finished(Batch(MODEL, eight, 0.0), BatchRun([ItemResult()] * 8, "v", 0.0, 0.008))


def test_low_batches_run_in_measured_slices_with_identical_results(
    demo_registry: ModelRegistry,
) -> None:
    lanes, now = Lanes(capacity=10_000), [0.0]
    scheduler = Scheduler(
        SchedulingConfig(slice_ms=10.0),
        demo_registry,
        lanes,
        max_batch=256,
        metrics=CollectorRegistry(),
        clock=lambda: now[0],
    )
    measure_slices(scheduler, demo_registry)
    config = BatchConfig(max_wait_ms=5, swap_patience_ms=0)
    batcher = Batcher(lanes, config, limit=scheduler.limit, grouped=lambda _: False)
    requests = digits_requests(95)
    low = [as_pending(demo_registry, r, Priority.LOW) for r in requests[:-1]]
    high = as_pending(demo_registry, requests[-1], Priority.HIGH)
    for p in [*low, high]:
        lanes.push(p)

    sliced: dict[str, object] = {}
    sizes: list[tuple[Priority, int]] = []
    while len(lanes):
        plan = batcher.plan(now[0], idle=LANE_ORDER)
        assert plan.batch is not None
        scheduler.dispatched(plan.batch)
        sizes.append((plan.batch.items[0].lane, len(plan.batch)))
        run = run_batch(demo_registry.get, plan.batch)
        sliced |= {
            p.request.request_id: r.outputs
            for p, r in zip(plan.batch.items, run.results, strict=True)
        }
        now[0] += 0.01
    whole = run_batch(demo_registry.get, Batch(MODEL, low, formed_s=0.0))

    assert sizes[0][0] == Priority.HIGH  # the high request first, low ones riding along
    assert all(n <= 10 for _, n in sizes), sizes
    assert sum(n for _, n in sizes) == 95
    unsliced = {p.request.request_id: r.outputs for p, r in zip(low, whole.results, strict=True)}
    assert set(unsliced) == set(sliced) - {high.request.request_id}
    for rid, out in unsliced.items():
        # Same label; probabilities equal to float32 precision (a matrix product's
        # blocking, so its last bits, depends on the batch size, sliced or not).
        assert isinstance(out, dict)
        assert sliced[rid] == {
            "label": out["label"],
            "probs": pytest.approx(out["probs"], rel=1e-4, abs=1e-6),
        }


def test_low_batches_are_sliced_only_while_a_higher_lane_is_active(
    demo_registry: ModelRegistry,
) -> None:
    lanes, now = Lanes(capacity=100), [100.0]
    scheduler = Scheduler(
        SchedulingConfig(slice_ms=10.0, active_window_s=1.0),
        demo_registry,
        lanes,
        max_batch=256,
        metrics=CollectorRegistry(),
        clock=lambda: now[0],
    )
    measure_slices(scheduler, demo_registry)
    cap = scheduler.limit(MODEL, Priority.LOW)
    assert cap > 10
    high = as_pending(demo_registry, digits_requests(1)[0], Priority.HIGH)
    scheduler.dispatched(Batch(MODEL, [high], formed_s=now[0]))
    assert scheduler.limit(MODEL, Priority.LOW) == 10  # high ran just now: slices
    assert scheduler.limit(MODEL, Priority.NORMAL) == 10
    assert scheduler.limit(MODEL, Priority.HIGH) == cap  # high itself is never sliced
    now[0] += 1.5
    assert scheduler.limit(MODEL, Priority.LOW) == cap  # high quiet again: whole batches
    lanes.push(high)
    assert scheduler.limit(MODEL, Priority.LOW) == 10  # a high request waiting: slices
