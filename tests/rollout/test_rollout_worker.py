"""Rollouts end to end: real broker, real SQLite and PostgreSQL, the worker deciding.

Short intervals (about a second) keep the tests quick; the policy is the same at 60 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import func, select

from consumers.client import InferlaneClient
from consumers.contract import InferenceRequest, Status
from storage import ResultStore, make_engine
from storage.rollouts import RolloutRecord, RolloutStore
from storage.schema import drift_windows, inference_results, rollout_stats
from tests.e2e.support import settings_for, wait_for_rows
from tests.ops.support import aget
from worker.demo.workload import digits_requests
from worker.facade import Worker
from worker.intake.broker import EmbeddedBroker, free_port
from worker.models import ModelRegistry
from worker.rollout.begin import begin
from worker.settings import OpsConfig, RolloutConfig, WorkerSettings
from worker.settings.rollout_plan import Gates, Mode, RolloutPlan

# Latency is not these tests' subject (test_rollout_gates covers the p99 gate): on a
# loaded two-core CI machine one stalled candidate batch is the p99 of a short interval
# and rolled back an equivalent candidate (p99 100 ms against 44 ms allowed). Wider
# limits for error rate and labelled error let the tests decide in a few hundred
# answers (test_rollout_error_rates covers the defaults).
GATES = Gates(
    min_requests=15,
    max_p99_ratio=10,
    p99_slack_ms=1000,
    max_error_rate_increase=0.05,
    max_label_error_increase=0.1,
)


def plan(mode: Mode = Mode.CANARY, **changes: object) -> RolloutPlan:
    fields: dict[str, object] = {
        "mode": mode, "steps": [20, 50, 100], "interval_s": 1.5, "passes": 1, "sample": 1.0,
        "gates": GATES,
    }  # fmt: skip
    return RolloutPlan.model_validate({**fields, **changes})


def start(db_url: str, registry: ModelRegistry, version: str, p: RolloutPlan) -> RolloutRecord:
    with ResultStore(db_url) as store:  # migrates
        candidate = registry.candidates()[f"digits@{version}"]
        return begin(RolloutStore(store.engine), registry.spec("digits"), candidate, p)


def settings(broker: EmbeddedBroker, db_url: str, **overrides: Any) -> WorkerSettings:
    return settings_for(
        broker.bootstrap,
        db_url,
        rollout=RolloutConfig(poll_s=0.2),
        ops=OpsConfig(http_port=0),
        **overrides,
    )


@contextlib.asynccontextmanager
async def traffic(
    bootstrap: str, per_tick: int = 20, tag: str = "t"
) -> AsyncIterator[list[InferenceRequest]]:
    """Labelled digits requests, ``per_tick`` every 100 ms, until the block ends."""
    sent: list[InferenceRequest] = []
    stop = asyncio.Event()

    async def publish() -> None:
        with InferlaneClient(bootstrap) as client:
            while not stop.is_set():
                chunk = digits_requests(per_tick, prefix=f"{tag}{len(sent)}")
                await asyncio.to_thread(client.publish, chunk)
                sent.extend(chunk)
                await asyncio.sleep(0.1)

    task = asyncio.create_task(publish())
    try:
        yield sent
    finally:
        stop.set()
        await task


async def until(store: RolloutStore, rollout_id: int, done: Callable[[RolloutRecord], bool],
                timeout_s: float = 60.0) -> RolloutRecord:  # fmt: skip
    deadline = time.monotonic() + timeout_s
    while True:
        record = await asyncio.to_thread(store.get, rollout_id)
        assert record is not None
        if done(record) or time.monotonic() > deadline:
            return record
        await asyncio.sleep(0.1)


def versions(db_url: str, ids: list[str] | None = None) -> Counter[str]:
    engine = make_engine(db_url)
    try:
        query = select(inference_results.c.request_id, inference_results.c.model_version)
        with engine.connect() as conn:
            rows = conn.execute(query).all()
    finally:
        engine.dispose()
    wanted = None if ids is None else set(ids)
    return Counter(v for rid, v in rows if wanted is None or rid in wanted)


def first_answer(db_url: str, version: str) -> datetime:
    """When the version first answered a request (its first result row)."""
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            first = conn.execute(
                select(func.min(inference_results.c.created_at)).where(
                    inference_results.c.model_version == version
                )
            ).scalar_one()
    finally:
        engine.dispose()
    return first if first.tzinfo else first.replace(tzinfo=UTC)


def exactly_once(db_url: str, sent: list[InferenceRequest]) -> None:
    engine = make_engine(db_url)
    try:
        assert wait_for_rows(engine, len(sent)) == len(sent)  # one row per request id
    finally:
        engine.dispose()


async def test_a_worse_candidate_is_rolled_back_within_one_interval(
    broker: EmbeddedBroker, db_url: str, rollout_registry_path: Path
) -> None:
    registry = ModelRegistry.from_toml(rollout_registry_path)
    async with Worker(settings(broker, db_url), registry) as worker:
        store = RolloutStore(worker.store.engine)  # type: ignore[union-attr]
        async with traffic(broker.bootstrap) as sent:
            await asyncio.sleep(1.0)  # the primary serving alone
            started = start(db_url, registry, "worse", plan(interval_s=3.0))
            ended = await until(store, started.id, lambda r: r.state != "running")
            await asyncio.sleep(1.0)  # requests after the rollback
        await asyncio.to_thread(exactly_once, db_url, sent)

    assert ended.state == "rolled_back" and ended.share == 0.0
    # Within one interval of the candidate's first answer (the worker may still be
    # working through requests admitted before the rollout started).
    took = (ended.updated_at - first_answer(db_url, "worse")).total_seconds()
    assert took <= started.interval_s, f"rolled back {took:.1f}s after its first answer"
    events = store.events(started.id)
    assert [e.decision for e in events if e.decision != "wait"] == ["start", "rollback"]
    # Whichever judged first with enough data: both measure what the noise broke.
    failed = {name for name, gate in events[-1].gates.items() if gate["verdict"] == "fail"}
    assert failed and failed <= {"disagreement", "label_error_increase"}, ended.reason
    assert all(name in (ended.reason or "") for name in failed)
    served = versions(db_url)
    assert served["worse"] > 0 and served["1"] > served["worse"]  # the canary answered some
    late = [r.request_id for r in sent[-5:]]
    assert versions(db_url, late) == Counter({"1": 5})  # after the rollback: the primary
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            query = select(drift_windows.c.model, drift_windows.c.model_version).distinct()
            windows = set(conn.execute(query).all())
    finally:
        engine.dispose()
    assert windows == {("digits", "1"), ("digits", "worse")}  # drift windows per version


async def test_an_equivalent_candidate_is_promoted_through_every_step(
    broker: EmbeddedBroker, db_url: str, rollout_registry_path: Path
) -> None:
    registry = ModelRegistry.from_toml(rollout_registry_path)
    async with Worker(settings(broker, db_url), registry) as worker:
        store = RolloutStore(worker.store.engine)  # type: ignore[union-attr]
        async with traffic(broker.bootstrap) as sent:
            started = start(db_url, registry, "2", plan())
            ended = await until(store, started.id, lambda r: r.state != "running")
            mark = len(sent)
            await asyncio.sleep(1.0)
        await asyncio.to_thread(exactly_once, db_url, sent)

    assert ended.state == "promoted" and ended.share == 1.0, ended.reason
    events = store.events(started.id)
    moves = [(e.decision, e.share) for e in events if e.decision in ("advance", "promote")]
    assert moves == [("advance", 0.5), ("advance", 1.0), ("promote", 1.0)]
    assert all(e.decision in ("start", "wait", "advance", "promote") for e in events)
    labels = events[-1].gates["label_error_increase"]  # decided on the labels: not worse
    assert labels["verdict"] == "pass" and labels["high"] < GATES.max_label_error_increase
    after = [r.request_id for r in sent[mark:]]
    assert after and versions(db_url, after) == Counter({"2": len(after)})


async def test_a_shadow_candidate_computes_but_never_publishes(
    broker: EmbeddedBroker, rollout_registry_path: Path, tmp_path: Path
) -> None:
    db_url = f"sqlite:///{tmp_path / 'shadow.db'}"
    registry = ModelRegistry.from_toml(rollout_registry_path)
    port = free_port()
    with_page = settings(broker, db_url).model_copy(update={"ops": OpsConfig(http_port=port)})
    async with Worker(with_page, registry) as worker:
        store = RolloutStore(worker.store.engine)  # type: ignore[union-attr]
        with InferlaneClient(broker.bootstrap) as client:
            await asyncio.to_thread(client.watch_results)
            async with traffic(broker.bootstrap) as sent:
                started = start(db_url, registry, "2", plan(Mode.SHADOW, passes=2))
                record = await until(store, started.id, lambda r: r.passes >= 2)
                status, body = await aget(f"http://127.0.0.1:{port}/status.json")
            results = await asyncio.to_thread(
                client.results, [r.request_id for r in sent], timeout_s=60
            )
        engine = worker.store.engine  # type: ignore[union-attr]
        with engine.connect() as conn:
            candidate_rows = conn.execute(
                select(rollout_stats.c.compared).where(rollout_stats.c.role == "candidate")
            ).all()

    assert record.state == "running" and record.share == 0.0
    assert "ready to promote" in (record.reason or "")
    assert status == 200
    [shown] = orjson.loads(body)["rollouts"]  # the status page shows the rollout
    assert (shown["model"], shown["candidate"], shown["mode"]) == ("digits", "2", "shadow")
    assert shown["state"] == "running" and shown["share"] == 0.0
    assert shown["gates"]["disagreement"]["value"] == 0.0  # same weights: no disagreement
    assert {r.model_version for r in results.values()} == {"1"}  # Kafka: the primary only
    assert {r.status for r in results.values()} == {Status.OK}
    assert versions(db_url) == Counter({"1": len(sent)})  # SQL: the primary only
    assert sum(c for (c,) in candidate_rows) > 0  # it did compute


async def test_two_workers_follow_one_rollout(
    broker: EmbeddedBroker, pg_url: str, rollout_registry_path: Path
) -> None:
    db_url = pg_url
    registry = ModelRegistry.from_toml(rollout_registry_path)
    group = settings(broker, db_url, topics={"partitions": 4})
    other = ModelRegistry.from_toml(rollout_registry_path)
    async with Worker(group, registry) as a, Worker(group, other) as b:
        store = RolloutStore(a.store.engine)  # type: ignore[union-attr]
        async with traffic(broker.bootstrap) as sent:
            started = start(db_url, registry, "2", plan(steps=[50, 100], interval_s=2.0))
            ended = await until(store, started.id, lambda r: r.state != "running")
            parts = {"a": {p for _, p in a.assignment}, "b": {p for _, p in b.assignment}}
        await asyncio.to_thread(exactly_once, db_url, sent)
        with a.store.engine.connect() as conn:  # type: ignore[union-attr]
            workers = conn.execute(select(rollout_stats.c.worker).distinct()).all()
            rows = conn.execute(
                select(inference_results.c.source_partition, inference_results.c.model_version)
            ).all()

    assert ended.state == "promoted", ended.reason
    assert parts["a"] and parts["b"]  # both consumed
    for name, mine in parts.items():  # each worker answered with both versions
        served = {v for p, v in rows if p in mine}
        assert served == {"1", "2"}, (name, served)
    assert len(workers) == 2  # both reported counts for the gates
    moves = [e.decision for e in store.events(started.id) if e.decision != "wait"]
    assert moves == ["start", "advance", "promote"]  # each decision taken once


async def test_a_restarted_worker_resumes_the_rollout(
    broker: EmbeddedBroker, rollout_registry_path: Path, tmp_path: Path
) -> None:
    db_url = f"sqlite:///{tmp_path / 'restart.db'}"
    group = settings(broker, db_url)
    # Traffic stops before each worker does: every request published is consumed.
    async with Worker(group, ModelRegistry.from_toml(rollout_registry_path)) as worker:
        store = RolloutStore(worker.store.engine)  # type: ignore[union-attr]
        async with traffic(broker.bootstrap, tag="a") as before:
            registry = ModelRegistry.from_toml(rollout_registry_path)
            started = start(db_url, registry, "2", plan(steps=[20, 50, 100]))
            mid = await until(store, started.id, lambda r: r.step >= 1)
    # Down: the rollout waits in SQL. A new worker process picks it up.
    async with Worker(group, ModelRegistry.from_toml(rollout_registry_path)) as worker:
        store = RolloutStore(worker.store.engine)  # type: ignore[union-attr]
        async with traffic(broker.bootstrap, tag="b") as after:
            ended = await until(store, started.id, lambda r: r.state != "running")
    await asyncio.to_thread(exactly_once, db_url, before + after)

    assert mid.state == "running" and mid.step >= 1
    assert ended.state == "promoted", ended.reason
    decisions = [e.decision for e in store.events(started.id)]
    assert decisions.count("start") == 1 and decisions[-1] == "promote"
    assert [e.share for e in store.events(started.id) if e.decision == "advance"] == [0.5, 1.0]


async def test_a_rollout_declared_in_the_registry_starts_once(
    broker: EmbeddedBroker, rollout_registry_path: Path, tmp_path: Path
) -> None:
    # Beside the demo registry: its model paths are relative to its folder.
    declared = rollout_registry_path.with_name(f"declared-{tmp_path.name}.toml")
    declared.write_text(
        rollout_registry_path.read_text()
        + '[candidates.rollout]\nmode = "shadow"\ninterval_s = 30\nsample = 0.5\n'
    )  # the table belongs to the last candidate: "worse"
    db_url = f"sqlite:///{tmp_path / 'declared.db'}"
    for _ in range(2):  # a restart finds it started and starts nothing more
        async with Worker(settings(broker, db_url), ModelRegistry.from_toml(declared)) as worker:
            store = RolloutStore(worker.store.engine)  # type: ignore[union-attr]
            [record] = store.all("digits")
    assert (record.candidate_version, record.mode, record.state) == ("worse", "shadow", "running")
    assert (record.interval_s, record.sample, record.share) == (30, 0.5, 0.0)
