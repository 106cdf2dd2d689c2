"""A compute thread takes its queued batches highest lane first, in order within a lane."""

from __future__ import annotations

import threading
from concurrent.futures import Future, wait

from consumers.contract import Priority
from worker.base.pending import Batch
from worker.execution.compute_threads import Supervised

HIGH, NORMAL, LOW = Priority.HIGH, Priority.NORMAL, Priority.LOW


def test_queued_batches_run_by_lane_then_by_arrival() -> None:
    holding, gate, ran = threading.Event(), threading.Event(), []

    def work(batch: Batch) -> str:
        if batch.model == "gate":
            holding.set()
            gate.wait(10)  # holds the thread while the others queue up
        ran.append(batch.model)
        return batch.model

    thread: Supervised[str] = Supervised(lambda: work)
    queued = [
        ("gate", LOW),
        ("low-1", LOW),
        ("normal-1", NORMAL),
        ("high-1", HIGH),
        ("low-2", LOW),
        ("high-2", HIGH),
    ]
    futures: list[Future[str]] = []
    for model, lane in queued:
        future: Future[str] = Future()
        thread.put(Batch(model, [], 0.0, lane=lane), future)
        futures.append(future)
        if model == "gate":
            assert holding.wait(10)
    gate.set()
    done, _ = wait(futures, timeout=10)
    thread.close()
    assert len(done) == len(queued)
    assert ran == ["gate", "high-1", "high-2", "normal-1", "low-1", "low-2"]
