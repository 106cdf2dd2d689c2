"""Readiness: a pure decision over measured facts, and the probe that measures them."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import Engine, text

from consumers.broker_check import BrokerUnreachable, check_broker
from consumers.offsets import TopicPartitionKey
from worker.base.blocking import one_thread_pool
from worker.ops.view import WorkerView
from worker.settings import OpsConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Facts:
    assigned_partitions: int
    models_warm: bool
    database_error: str | None  # None: reachable
    lag: dict[TopicPartitionKey, int]
    broker_error: str | None = None  # None: a bootstrap server answered


@dataclass(frozen=True, slots=True)
class Readiness:
    checks: dict[str, bool]
    missing: list[str] = field(default_factory=list)  # one sentence per failing check

    @property
    def ready(self) -> bool:
        return not self.missing

    def body(self) -> dict[str, object]:
        return {"ready": self.ready, "checks": self.checks, "missing": self.missing}


def decide(facts: Facts, *, max_lag: int) -> Readiness:
    """Ready when the broker and the database answer, the group gave us partitions,
    every model is warm and no partition is more than ``max_lag`` records behind."""
    behind = {tp: n for tp, n in facts.lag.items() if n > max_lag}
    checks = {
        "broker": facts.broker_error is None,
        "partitions_assigned": facts.assigned_partitions > 0,
        "models_warm": facts.models_warm,
        "database": facts.database_error is None,
        "lag": not behind,
    }
    missing = []
    if facts.broker_error is not None:
        missing.append(f"broker unreachable: {facts.broker_error}")
    if not checks["partitions_assigned"]:
        missing.append("no partitions assigned: the consumer group has not been joined yet")
    if not checks["models_warm"]:
        missing.append("models are still loading or warming up")
    if facts.database_error is not None:
        missing.append(f"database unreachable: {facts.database_error}")
    for (topic, partition), n in sorted(behind.items()):
        missing.append(f"{topic}[{partition}] is {n} records behind (bound {max_lag})")
    return Readiness(checks, missing)


class _Ping:
    """One blocking check on a thread of its own, at most one at a time; its answer
    (None, or what is wrong) is kept for ``min_interval_s``.

    A dependency that hangs (no answer, not a refusal) holds that thread only, never the
    event loop nor the pool the pipeline's work uses; later pings wait on the same call.
    """

    def __init__(self, name: str, timeout_s: float, min_interval_s: float) -> None:
        self._timeout_s = timeout_s
        self._min_interval_s = min_interval_s
        self._checked_s = float("-inf")
        self._error: str | None = "not checked yet"
        self._lock = asyncio.Lock()
        self._thread = one_thread_pool(name)
        self._running: asyncio.Future[None] | None = None

    async def error(
        self, check: Callable[[], None], describe: Callable[[Exception], str]
    ) -> str | None:
        async with self._lock:  # concurrent requests share one ping
            if time.monotonic() - self._checked_s >= self._min_interval_s:
                self._error = await self._ping(check, describe)
                self._checked_s = time.monotonic()
            return self._error

    async def _ping(
        self, check: Callable[[], None], describe: Callable[[Exception], str]
    ) -> str | None:
        if self._running is None or self._running.done():
            self._running = asyncio.wrap_future(self._thread.submit(check))
            # An answer that comes after the timeout is read here, or nowhere.
            self._running.add_done_callback(_retrieved)
        try:
            await asyncio.wait_for(asyncio.shield(self._running), self._timeout_s)
        except TimeoutError:
            return f"no answer within {self._timeout_s} s"
        except Exception as exc:
            return describe(exc)
        return None

    def close(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)


class ReadinessProbe:
    """Measures the facts; the database and the broker are each pinged at most once per
    ``min_interval_s``, each on a thread of its own (``_Ping``)."""

    def __init__(self, view: WorkerView, config: OpsConfig, *, min_interval_s: float = 1.0):
        self._view = view
        self._config = config
        self._db = _Ping("db-ping", config.db_probe_timeout_s, min_interval_s)
        self._broker = _Ping("broker-ping", config.broker_probe_timeout_s, min_interval_s)

    async def check(self) -> Readiness:
        view = self._view
        try:
            lag = await asyncio.wait_for(
                view.intake.consumer_lag(), self._config.db_probe_timeout_s
            )
        except Exception:  # mid-rebalance: judged by the other checks this time
            lag = {}
        database, broker = await asyncio.gather(self._database(), self._broker_error())
        facts = Facts(len(view.intake.assignment), view.models_warm, database, lag, broker)
        return decide(facts, max_lag=self._config.ready_max_lag)

    async def _database(self) -> str | None:
        store = self._view.store
        if store is None:
            return "not connected yet"
        engine = store.engine
        return await self._db.error(lambda: _select_one(engine), lambda e: _describe(e, engine))

    async def _broker_error(self) -> str | None:
        kafka = self._view.settings.kafka
        bootstrap = self._view.settings.bootstrap
        if bootstrap is None:
            return "no bootstrap servers configured"
        timeout_s = self._config.broker_probe_timeout_s

        def ask() -> None:  # a fresh connection each time: a frozen broker cannot answer
            asyncio.run(check_broker(bootstrap, kafka.security, timeout_s=timeout_s))

        return await self._broker.error(ask, _broker_reason)

    def close(self) -> None:
        self._db.close()
        self._broker.close()


def _retrieved(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


def _select_one(engine: Engine) -> None:
    with engine.connect() as conn:
        conn.execute(text("SELECT 1"))


def _describe(exc: Exception, engine: Engine) -> str:
    """The driver's first line names the failure; never echo the password."""
    lines = str(exc).splitlines()
    message = f"{type(exc).__name__}: {lines[0] if lines else ''}"
    password = engine.url.password
    return message.replace(str(password), "***") if password else message


def _broker_reason(exc: Exception) -> str:
    if isinstance(exc, BrokerUnreachable):
        return "; ".join(exc.reasons)
    return f"{type(exc).__name__}: {exc}"
