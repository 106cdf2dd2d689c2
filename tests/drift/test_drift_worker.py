"""The worker end to end: a shift in live traffic is flagged within one window, reference
checks run beside the traffic, and late labels join the drift log whether they come
before or after their results."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import orjson
from kafka import KafkaProducer
from sqlalchemy import Engine, func, select

from consumers.client import InferlaneClient
from consumers.contract import DeadLetterHeaders
from storage import DriftRow, ResultStore, make_engine
from storage.drift_windows import read_flags, read_windows
from storage.retention import purge
from storage.schema import drift_labels, inference_log
from tests.e2e.support import read_topic, settings_for, wait_for_rows
from worker.demo.workload import digits_requests
from worker.facade import Worker
from worker.intake.broker import EmbeddedBroker
from worker.models import ModelRegistry
from worker.settings import DriftConfig
from worker.settings.drift_thresholds import DriftThresholds


async def _until(check: object, timeout_s: float = 60.0) -> None:
    """Poll ``check()`` (blocking, run in a thread) until it is true."""
    deadline = time.monotonic() + timeout_s
    while not await asyncio.to_thread(check):  # type: ignore[arg-type]
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


def _rows_in_windows(engine: Engine) -> int:
    return sum(w.rows for w in read_windows(engine))


async def test_a_shift_in_live_traffic_is_flagged_within_one_window(
    broker: EmbeddedBroker, db_url: str, demo_registry: ModelRegistry
) -> None:
    drift = DriftConfig(
        window_s=1,
        reference_rows=200,
        flush_s=0.2,
        labels_topic=None,
        thresholds=DriftThresholds(min_rows=50, min_labelled=20),
    )
    settings = settings_for(broker.bootstrap, db_url, drift=drift)
    engine = make_engine(db_url)
    clean = digits_requests(800, prefix="clean")
    shifted = digits_requests(800, prefix="shifted", inverted=True)
    async with Worker(settings, demo_registry):
        with InferlaneClient(broker.bootstrap) as client:
            await asyncio.to_thread(client.publish, clean)
            await asyncio.to_thread(client.flush)
            await _until(lambda: _rows_in_windows(engine) >= len(clean))
            # The shift starts with a fresh window: wait for the clock to leave the last
            # clean one, so every window is wholly clean or wholly shifted.
            shift_at = max(w.end for w in read_windows(engine))
            await _until(lambda: datetime.now(UTC) >= shift_at)
            await asyncio.to_thread(client.publish, shifted)
            await asyncio.to_thread(client.flush)
            await _until(lambda: _rows_in_windows(engine) >= len(clean) + len(shifted))

    windows = read_windows(engine, model="digits")
    flagged = {key.window_start for key, *_ in read_flags(engine, model="digits")}
    engine.dispose()
    before = [w for w in windows if w.end <= shift_at]
    after = [w for w in windows if w.start >= shift_at]
    assert len(before) + len(after) == len(windows)
    assert before and after
    assert not [w.start for w in before if w.start in flagged]
    # Caught in the first shifted window, and in every later one large enough to judge.
    assert after[0].start in flagged
    assert all(w.start in flagged for w in after if w.rows >= 50)


async def test_reference_checks_run_in_a_serving_worker(
    broker: EmbeddedBroker, db_url: str, demo_registry: ModelRegistry
) -> None:
    """Every digits request is checked against a reference model (digits itself, so
    every check agrees); the checks run on the worker's executor, beside the traffic."""
    thresholds = DriftThresholds(reference_model="digits", reference_share=1.0)
    drift = DriftConfig(flush_s=0.2, labels_topic=None, thresholds=thresholds)
    settings = settings_for(broker.bootstrap, db_url, drift=drift)
    engine = make_engine(db_url)
    requests = digits_requests(300, prefix="ref")

    def checked() -> int:
        return sum(w.ref_checked for w in read_windows(engine, model="digits"))

    async with Worker(settings, demo_registry):
        with InferlaneClient(broker.bootstrap) as client:
            await asyncio.to_thread(client.publish, requests)
        await _until(lambda: checked() >= len(requests))
    windows = read_windows(engine, model="digits")
    engine.dispose()
    assert sum(w.ref_checked for w in windows) == len(requests)
    assert sum(w.ref_deviant for w in windows) == 0


def _labels(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(drift_labels)).scalar_one())


def _logged(engine: Engine) -> dict[str, float]:
    with engine.connect() as conn:
        rows = conn.execute(select(inference_log.c.request_id, inference_log.c.expected))
        return {rid: expected for rid, expected in rows}


async def test_late_labels_join_before_and_after_their_results(
    broker: EmbeddedBroker, db_url: str, demo_registry: ModelRegistry
) -> None:
    # Long enough for the early labels to see their results on a loaded machine.
    drift = DriftConfig(label_wait_s=10.0, flush_s=0.2)
    settings = settings_for(broker.bootstrap, db_url, drift=drift)
    engine = make_engine(db_url)
    early = [r.model_copy(update={"expected": None}) for r in digits_requests(10, prefix="e")]
    late = [r.model_copy(update={"expected": None}) for r in digits_requests(10, prefix="l")]
    truth = {r.request_id: 7 for r in early + late}
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)

    def label(request_id: str, expected: object) -> None:
        value = orjson.dumps({"request_id": request_id, "expected": expected})
        producer.send("inferlane.labels", value, key=request_id.encode()).get(timeout=30)

    async with Worker(settings, demo_registry):
        for r in early:
            label(r.request_id, 7)
        label("nobody", 3)  # no such request: waits, then a dead letter
        producer.send("inferlane.labels", b"{not json", key=b"bad").get(timeout=30)
        await _until(lambda: _labels(engine) >= len(early))  # waiting for their results
        with InferlaneClient(broker.bootstrap) as client:
            await asyncio.to_thread(client.publish, early + late)
            await asyncio.to_thread(client.flush)
        assert await asyncio.to_thread(wait_for_rows, engine, len(early) + len(late)) == 20
        for r in late:
            label(r.request_id, 7)
        label(late[0].request_id, 1)  # a second label for the same id changes nothing
        await _until(lambda: len(_logged(engine)) == len(truth))
        dead = await asyncio.to_thread(read_topic, broker.bootstrap, "inferlane.requests.dlq", 2)
    producer.close()

    assert _logged(engine) == {rid: 7.0 for rid in truth}
    assert sum(w.labelled for w in read_windows(engine)) == len(truth)
    assert _labels(engine) == 0
    codes = {m.key: dict(m.headers)[DeadLetterHeaders.CODE] for m in dead}
    assert codes == {b"nobody": b"label_unmatched", b"bad": b"bad_label"}
    engine.dispose()


async def test_retention_deletes_old_rows_while_the_worker_writes(
    broker: EmbeddedBroker, db_url: str, demo_registry: ModelRegistry
) -> None:
    old_at = datetime.now(UTC) - timedelta(days=100)
    with ResultStore(db_url) as store:
        old = [DriftRow(f"old-{i}", "digits", "1", 1.0, 2.0, -1.0, old_at) for i in range(3000)]
        store.write([], old, [])
    settings = settings_for(broker.bootstrap, db_url, drift=DriftConfig(labels_topic=None))
    engine = make_engine(db_url)
    requests = digits_requests(1500, prefix="new")
    async with Worker(settings, demo_registry):
        with InferlaneClient(broker.bootstrap) as client:
            await asyncio.to_thread(client.publish, requests)
            await asyncio.to_thread(client.flush)
            await asyncio.to_thread(wait_for_rows, engine, 1)  # the worker is writing
            cutoff = datetime.now(UTC) - timedelta(days=30)
            purged = await asyncio.to_thread(purge, engine, cutoff, batch_rows=50)
            assert await asyncio.to_thread(wait_for_rows, engine, len(requests)) == len(requests)

    assert purged.rows["inference_log"] == len(old)
    logged = _logged(engine)
    assert len(logged) == len(requests)
    assert all(rid.startswith("new-") for rid in logged)
    engine.dispose()
