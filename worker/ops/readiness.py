"""Readiness: a pure decision over measured facts, and the probe that measures them."""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from sqlalchemy import Engine, text

from consumers.offsets import TopicPartitionKey
from worker.config import OpsConfig
from worker.ops.view import WorkerView

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Facts:
    assigned_partitions: int
    models_warm: bool
    database_error: str | None  # None: reachable
    lag: dict[TopicPartitionKey, int]


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
    """Ready when the group gave us partitions, every model is warm, the database
    answers and no partition is more than ``max_lag`` records behind."""
    behind = {tp: n for tp, n in facts.lag.items() if n > max_lag}
    checks = {
        "partitions_assigned": facts.assigned_partitions > 0,
        "models_warm": facts.models_warm,
        "database": facts.database_error is None,
        "lag": not behind,
    }
    missing = []
    if not checks["partitions_assigned"]:
        missing.append("no partitions assigned: the consumer group has not been joined yet")
    if not checks["models_warm"]:
        missing.append("models are still loading or warming up")
    if facts.database_error is not None:
        missing.append(f"database unreachable: {facts.database_error}")
    for (topic, partition), n in sorted(behind.items()):
        missing.append(f"{topic}[{partition}] is {n} records behind (bound {max_lag})")
    return Readiness(checks, missing)


class ReadinessProbe:
    """Measures the facts; the database is pinged at most once per ``min_interval_s``.

    Pings run on a thread of their own, one at a time: a database that hangs (no answer,
    not a refusal) holds that thread only, never the pool the pipeline's work uses.
    """

    def __init__(self, view: WorkerView, config: OpsConfig, *, min_interval_s: float = 1.0):
        self._view = view
        self._config = config
        self._min_interval_s = min_interval_s
        self._db_checked_s = float("-inf")
        self._db_error: str | None = "not checked yet"
        self._db_lock = asyncio.Lock()
        self._pinger = ThreadPoolExecutor(max_workers=1, thread_name_prefix="inferlane-db-ping")
        self._ping_running: Future[None] | None = None

    async def check(self) -> Readiness:
        view = self._view
        try:
            lag = await asyncio.wait_for(view.consumer_lag(), self._config.db_probe_timeout_s)
        except Exception:  # mid-rebalance: judged by the other checks this time
            lag = {}
        facts = Facts(len(view.assignment), view.models_warm, await self._database(), lag)
        return decide(facts, max_lag=self._config.ready_max_lag)

    async def _database(self) -> str | None:
        async with self._db_lock:  # concurrent requests share one ping
            if time.monotonic() - self._db_checked_s >= self._min_interval_s:
                self._db_error = await self._ping()
                self._db_checked_s = time.monotonic()
            return self._db_error

    async def _ping(self) -> str | None:
        store = self._view.store
        if store is None:
            return "not connected yet"
        if self._ping_running is None or self._ping_running.done():
            self._ping_running = self._pinger.submit(_select_one, store.engine)
        try:
            await asyncio.wait_for(
                asyncio.shield(asyncio.wrap_future(self._ping_running)),
                self._config.db_probe_timeout_s,
            )
        except TimeoutError:
            return f"no answer within {self._config.db_probe_timeout_s} s"
        except Exception as exc:
            return _describe(exc, store.engine)
        return None

    def close(self) -> None:
        self._pinger.shutdown(wait=False, cancel_futures=True)


def _select_one(engine: Engine) -> None:
    with engine.connect() as conn:
        conn.execute(text("SELECT 1"))


def _describe(exc: Exception, engine: Engine) -> str:
    """The driver's first line names the failure; never echo the password."""
    lines = str(exc).splitlines()
    message = f"{type(exc).__name__}: {lines[0] if lines else ''}"
    password = engine.url.password
    return message.replace(str(password), "***") if password else message
