"""/readyz follows the broker: 503 with the reason within 10 s of the embedded broker
being frozen (SIGSTOP) or killed, 200 within 10 s of its return (SIGCONT, or a new
broker on the same port)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from e2e.support import settings_for, wait_for_rows

from consumers.client import InferlaneClient
from storage import make_engine
from worker.demo.workload import digits_requests
from worker.facade import Worker
from worker.intake.broker import EmbeddedBroker, free_port
from worker.models import ModelRegistry
from worker.ops.readiness import Facts, decide
from worker.settings import OpsConfig

from .support import aget, until

FLIP_S = 10.0  # the bound readiness keeps, both ways


def test_decide_names_an_unreachable_broker_first() -> None:
    facts = Facts(3, True, None, {}, broker_error="127.0.0.1:9092: connection refused")
    readiness = decide(facts, max_lag=100)
    assert not readiness.ready and readiness.checks["broker"] is False
    assert readiness.missing == ["broker unreachable: 127.0.0.1:9092: connection refused"]


@pytest.fixture
def own_broker() -> Iterator[list[EmbeddedBroker]]:
    """A broker this test may kill and replace: the list holds the current one."""
    brokers = [EmbeddedBroker().start()]
    yield brokers
    brokers[-1].stop()


async def test_readiness_follows_a_frozen_then_a_killed_broker(
    own_broker: list[EmbeddedBroker], tmp_path: Path, demo_registry: ModelRegistry
) -> None:
    broker = own_broker[0]
    port = free_port()
    db = f"sqlite:///{tmp_path / 'ready.db'}"
    settings = settings_for(broker.bootstrap, db, ops=OpsConfig(http_port=port))
    readyz = f"http://127.0.0.1:{port}/readyz"

    async def answer() -> dict:
        status, body = await aget(readyz)
        return {"status": status, **orjson.loads(body)}

    async def flips_to(ready: bool, what: str) -> dict:
        """The answer once ready is ``ready``, which must happen within FLIP_S."""
        seen: list[dict] = []

        async def flipped() -> bool:
            seen.append(await answer())
            return seen[-1]["ready"] is ready

        await until(flipped, timeout_s=FLIP_S, what=what)
        assert seen[-1]["status"] == (200 if ready else 503)
        return seen[-1]

    engine = make_engine(db)
    try:
        async with Worker(settings, demo_registry):

            async def ready_now() -> bool:
                return bool((await answer())["ready"])

            await until(ready_now, what="ready at start")  # models warm, group joined
            assert (await answer())["checks"]["broker"] is True

            assert broker.pid is not None
            os.kill(broker.pid, signal.SIGSTOP)
            started = time.monotonic()
            frozen = await flips_to(False, "not ready with the broker frozen")
            assert frozen["checks"]["broker"] is False
            assert any(m.startswith("broker unreachable: ") for m in frozen["missing"])
            assert "answer within" in str(frozen["missing"])  # accepted, never answered
            assert (await aget(readyz.replace("readyz", "healthz")))[0] == 200
            os.kill(broker.pid, signal.SIGCONT)
            await flips_to(True, "ready again with the broker thawed")
            assert time.monotonic() - started < 2 * FLIP_S
            # It serves again: nothing was lost while the broker was frozen.
            with InferlaneClient(broker.bootstrap) as client:
                await asyncio.to_thread(client.publish, digits_requests(20))
            assert await asyncio.to_thread(wait_for_rows, engine, 20) == 20

            broker_port = broker.port
            os.kill(broker.pid, signal.SIGKILL)
            killed = await flips_to(False, "not ready with the broker killed")
            assert f"127.0.0.1:{broker_port}: connection refused" in str(killed["missing"])
            broker.stop()  # reaps it
            # The embedded broker keeps data in memory only: the new one starts empty.
            own_broker.append(EmbeddedBroker(port=broker_port).start())
            back = await flips_to(True, "ready again with a broker on the same port")
            assert back["checks"]["broker"] is True
    finally:
        engine.dispose()
