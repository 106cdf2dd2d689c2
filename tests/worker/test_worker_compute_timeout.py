"""ThreadExecutor's watchdog: a hung batch fails with model_timeout, a fresh thread serves
the rest, and too many hung threads make the backend unhealthy."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
import torch
from pipeline_factories import classifier, pending
from prometheus_client import CollectorRegistry

from worker.base.pending import Batch
from worker.execution.compute_threads import ComputeUnhealthy
from worker.execution.executor import ThreadExecutor
from worker.models import LoadedModel, ModelRegistry, ModelSpec
from worker.settings import WorkerSettings

HANG = 7.0


class Hangs(torch.nn.Module):
    """A linear classifier that blocks on any input equal to ``HANG`` until released."""

    def __init__(self, release: threading.Event) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)
        self.release = release

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool((x == HANG).any()):
            self.release.wait(60)
        return self.linear(x)


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()  # let the abandoned threads end with the test


def executor_for(
    release: threading.Event, *, timeout_s: float | None, max_hung: int | None = None
) -> tuple[ThreadExecutor, CollectorRegistry]:
    module = Hangs(release)
    metrics = CollectorRegistry()
    loaded = LoadedModel("m", "v1", module, classifier(), 64, torch.device("cpu"))
    executor = ThreadExecutor(
        lambda name: loaded,
        timeout_s_for=lambda name: timeout_s,
        max_hung_threads=max_hung,
        metrics=metrics,
    )
    return executor, metrics


def batch_of(*firsts: float) -> Batch:
    return Batch("m", [pending(inputs=[f, 0.0, 0.0, 0.0]) for f in firsts], formed_s=0.0)


def hung_count(metrics: CollectorRegistry) -> float | None:
    return metrics.get_sample_value("inferlane_hung_compute_threads_total", {"model": "m"})


def test_a_hung_batch_fails_with_model_timeout_and_the_next_batch_runs(
    release: threading.Event,
) -> None:
    executor, metrics = executor_for(release, timeout_s=2.0)
    hung = executor.submit(batch_of(1.0, HANG))
    queued = executor.submit(batch_of(1.0, 2.0))  # waits behind the hung batch
    try:
        run = hung.result(timeout=30)
        assert [r.error.code if r.error else None for r in run.results] == ["model_timeout"] * 2
        assert run.results[1].error is not None and "2 s" in run.results[1].error.message
        after = queued.result(timeout=30)
        assert [r.error for r in after.results] == [None, None]
        assert executor.submit(batch_of(3.0)).result(timeout=30).results[0].error is None
        assert hung_count(metrics) == 1.0
        assert not executor.hung.unhealthy.done()  # no limit given
    finally:
        release.set()
        executor.shutdown()


def test_without_a_timeout_nothing_is_abandoned(release: threading.Event) -> None:
    executor, metrics = executor_for(release, timeout_s=None)
    slow = executor.submit(batch_of(HANG))
    try:
        with pytest.raises(TimeoutError):
            slow.result(timeout=0.5)
        release.set()
        assert slow.result(timeout=30).results[0].error is None
        assert hung_count(metrics) is None
    finally:
        executor.shutdown()


async def test_the_limit_of_hung_threads_fails_the_worker_future(
    release: threading.Event,
) -> None:
    executor, _ = executor_for(release, timeout_s=0.3, max_hung=2)
    failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    executor.fail_into(failed)
    try:
        first = await asyncio.wrap_future(executor.submit(batch_of(HANG)))
        assert not failed.done()
        second = await asyncio.wrap_future(executor.submit(batch_of(HANG)))
        for run in (first, second):
            assert run.results[0].error is not None
            assert run.results[0].error.code == "model_timeout"
        with pytest.raises(ComputeUnhealthy, match="2 compute threads hung"):
            await asyncio.wait_for(failed, 30)
    finally:
        release.set()
        await asyncio.to_thread(executor.shutdown)


def test_shutdown_finishes_what_was_queued_behind_a_hung_batch(
    release: threading.Event,
) -> None:
    executor, _ = executor_for(release, timeout_s=0.5)
    hung = executor.submit(batch_of(HANG))
    queued = executor.submit(batch_of(2.0))
    executor.shutdown()  # returns once the queued batch has run on the fresh thread
    assert hung.done() and queued.done()
    assert queued.result().results[0].error is None


def test_a_models_own_timeout_wins_over_the_configured_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("INFERLANE_COMPUTE__TIMEOUT_S", "30")
    monkeypatch.setenv("INFERLANE_COMPUTE__MAX_HUNG_THREADS", "5")
    compute = WorkerSettings().compute
    specs = [
        ModelSpec.model_validate(
            {
                "name": name,
                "version": "1",
                "format": "export",
                "path": "/nowhere.pt2",
                "adapter": {"kind": "regressor", "features": 4},
                **extra,
            }
        )
        for name, extra in (("slow", {"compute_timeout_s": 120.0}), ("plain", {}))
    ]
    executor = ThreadExecutor.configured(ModelRegistry(specs), compute, CollectorRegistry())
    try:
        assert executor._timeout_s_for is not None
        assert executor._timeout_s_for("slow") == 120.0
        assert executor._timeout_s_for("plain") == 30.0
        assert executor.hung.limit == 5
    finally:
        executor.shutdown()
