"""/readyz follows the database (cut and restored through a proxy) within 10 s each way,
and the JSON logs of that episode carry ids and codes but never payloads or the database
password."""

from __future__ import annotations

import asyncio
import io
import logging
import threading
from collections.abc import Iterator

import orjson
import pytest
from e2e.support import settings_for, wait_for_rows
from sqlalchemy import make_url

from consumers.client import InferlaneClient
from storage import make_engine
from worker.demo.workload import digits_requests
from worker.facade import Worker
from worker.intake.broker import EmbeddedBroker, free_port
from worker.models import ModelRegistry
from worker.ops.logs import JsonFormatter
from worker.ops.readiness import Facts, decide
from worker.settings import OpsConfig

from .support import CuttableProxy, aget, until

FLIP_S = 10.0  # readiness follows the database within this, both ways
PASSWORD = "pw-Secret-4711"  # trust auth accepts any password; the logs must not show it
MARKER = "PAYLOAD-MARKER-93c1"


def test_decide_names_every_missing_piece() -> None:
    facts = Facts(0, False, "OperationalError: refused", {("t", 0): 5, ("t", 1): 500})
    readiness = decide(facts, max_lag=100)
    assert not readiness.ready
    assert readiness.checks == {
        "broker": True, "partitions_assigned": False, "models_warm": False, "database": False,
        "lag": False,
    }  # fmt: skip
    assert len(readiness.missing) == 4 and "t[1] is 500 records behind" in readiness.missing[3]
    assert decide(Facts(3, True, None, {("t", 0): 100}), max_lag=100).ready


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield out
    root.removeHandler(handler)
    root.setLevel(level)


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)  # emptied afterwards
async def test_readiness_flips_with_the_database_and_logs_stay_clean(
    broker: EmbeddedBroker,
    db_url: str,
    demo_registry: ModelRegistry,
    json_logs: io.StringIO,
) -> None:
    proxy = await CuttableProxy("127.0.0.1", make_url(db_url).port or 5432).start()
    url = make_url(db_url).set(port=proxy.port, password=PASSWORD)
    port = free_port()
    settings = settings_for(
        broker.bootstrap, url.render_as_string(hide_password=False), ops=OpsConfig(http_port=port)
    )
    readyz = f"http://127.0.0.1:{port}/readyz"

    async def ready_is(want: bool) -> bool:
        return ((await aget(readyz))[0] == 200) is want

    good = [r.model_copy(update={"metadata": {"note": MARKER}}) for r in digits_requests(50)]
    bad = b'{"request_id": "bad-pg", "model": "digits", "inputs": "%s"}' % MARKER.encode()
    engine = make_engine(db_url)
    try:
        async with Worker(settings, demo_registry):
            await until(lambda: ready_is(True), what="ready with the database up")
            with InferlaneClient(broker.bootstrap) as client:
                await asyncio.to_thread(client.publish, good[:25])
                client.send_raw(bad, key=b"bad-pg")
                client.flush()
                assert await asyncio.to_thread(wait_for_rows, engine, 26) == 26

                proxy.cut()
                await until(lambda: ready_is(False), FLIP_S, what="not ready with the database cut")
                status, body = await aget(readyz)
                answer = orjson.loads(body)
                assert status == 503 and answer["checks"]["database"] is False
                assert any(m.startswith("database unreachable") for m in answer["missing"])
                assert answer["checks"]["partitions_assigned"] is True
                metrics = (await aget(f"http://127.0.0.1:{port}/metrics"))[1].decode()
                assert 'inferlane_ready_check{check="database"} 0.0' in metrics
                # Work arriving meanwhile reaches Kafka, then waits in the sink's SQL retries.
                await asyncio.to_thread(client.watch_results)
                ids = await asyncio.to_thread(client.publish, good[25:])
                await asyncio.to_thread(client.results, ids, timeout_s=60)

                async def retrying() -> bool:
                    return "database unavailable" in json_logs.getvalue()

                await until(retrying, what="the sink to retry the database")

                proxy.restore()
                await until(
                    lambda: ready_is(True), FLIP_S, what="ready again with the database back"
                )
                assert await asyncio.to_thread(wait_for_rows, engine, 51) == 51
    finally:
        engine.dispose()
        await proxy.stop()

    lines = [orjson.loads(line) for line in json_logs.getvalue().splitlines()]
    assert any(e.get("request_id") == "bad-pg" and e.get("error_code") == "bad_input"
               for e in lines)  # fmt: skip
    text = json_logs.getvalue()
    assert MARKER not in text
    assert PASSWORD not in text


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
async def test_a_database_that_hangs_is_reported_without_stalling_the_worker(
    broker: EmbeddedBroker, db_url: str, demo_registry: ModelRegistry
) -> None:
    proxy = await CuttableProxy("127.0.0.1", make_url(db_url).port or 5432).start()
    url = make_url(db_url).set(port=proxy.port).render_as_string(hide_password=False)
    port = free_port()
    settings = settings_for(broker.bootstrap, url, ops=OpsConfig(http_port=port))
    base = f"http://127.0.0.1:{port}"

    async def answer() -> dict:
        status, body = await aget(f"{base}/readyz")
        return {"status": status, **orjson.loads(body)}

    async def ready_is(want: bool) -> bool:
        return (await answer())["ready"] is want

    try:
        async with Worker(settings, demo_registry):
            await until(lambda: ready_is(True), what="ready")
            proxy.hang()
            await until(lambda: ready_is(False), FLIP_S, what="not ready while the database hangs")
            hung = await answer()
            # Readiness pings again and again; each waits on the one hung ping, so no
            # thread piles up, and the loop keeps answering.
            for _ in range(3):
                assert (await answer())["status"] == 503
            pingers = [t for t in threading.enumerate() if t.name.startswith("inferlane-db-ping")]
            assert len(pingers) == 1
            assert (await aget(f"{base}/healthz"))[0] == 200
            proxy.restore()
            await until(lambda: ready_is(True), FLIP_S, what="ready once the database answers")
    finally:
        await proxy.stop()
    assert any("no answer within" in m for m in hung["missing"]), hung
