"""The faults, one function each: run a stream, inject the fault, account for everything.

Each returns a ``Row``: lost (expected ids without a SQL row, or hostile records with
neither a result nor a dead letter), SQL duplicates, Kafka result duplicates (allowed:
results on Kafka are at-least-once), the worst recovery time (end of a fault to the next
SQL progress) and the workers' peak RSS.
"""

from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from bench.chaos.hostile import hostile_records
from bench.chaos.stack import TOPICS, Record, Stack
from bench.chaos.topics import dead_letters, result_counts
from bench.workloads import request_dict

WARM = 10  # requests that show a fresh worker is serving


@dataclass(frozen=True)
class Sizes:
    requests: int = 30_000
    kill_requests: int = 50_000
    kills: int = 20
    # Slow enough that the stream outlasts the kills (each restart takes seconds).
    kill_rate_per_s: float = 150.0
    rate_per_s: float = 800.0
    outage_s: float = 30.0
    freeze_s: float = 20.0
    dwell_s: float = 15.0  # how long the second worker stays
    hostile: int = 10_000
    hang_timeout_s: float = 10.0
    settle_s: float = 600.0  # the most a run may take to finish after its faults
    seed: int = 7

    @classmethod
    def quick(cls) -> Sizes:
        return cls(
            requests=3_000,
            kill_requests=3_000,
            kills=2,
            kill_rate_per_s=150.0,
            rate_per_s=300.0,
            outage_s=5.0,
            freeze_s=5.0,
            dwell_s=5.0,
            hostile=500,
            hang_timeout_s=3.0,
            settle_s=180.0,
        )


@dataclass
class Row:
    scenario: str
    records: int
    lost: int
    sql_duplicates: int
    kafka_duplicates: int
    recovery_s: float | None
    peak_rss_mb: float
    exits: int = 0  # workers that ended without being killed or stopped
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        recovered = self.recovery_s is None or self.recovery_s <= 30.0
        return self.lost == 0 and self.sql_duplicates == 0 and self.exits == 0 and recovered


def good(prefix: str, n: int) -> list[Record]:
    records = []
    for i in range(n):
        body = request_dict("digits", i, prefix=prefix)
        records.append((body["request_id"].encode(), orjson.dumps(body)))
    return records


def sigkills(workdir: Path, sizes: Sizes) -> Row:
    rng = random.Random(sizes.seed)
    with Stack(workdir) as stack:
        _serving(stack)
        stack.publish(good("kill", sizes.kill_requests), rate_per_s=sizes.kill_rate_per_s)
        ended: list[float] = []
        for _ in range(sizes.kills):
            # Once serving, a random moment later (and never past the end of the work).
            since = ended[-1] if ended else time.monotonic()
            if not stack.progress.wait_growth(since, 120):
                break
            time.sleep(rng.uniform(0.0, 3.0))
            if stack.progress.count >= WARM + sizes.kill_requests:
                break
            stack.workers[-1].kill()
            stack.start_worker()
            ended.append(time.monotonic())
        row = _account(
            stack, "SIGKILL", "kill", sizes.kill_requests, sizes, f"{len(ended)} SIGKILLs"
        )
        row.recovery_s = _worst(stack, ended)
        return row


def database_outage(workdir: Path, sizes: Sizes) -> Row:
    with Stack(workdir) as stack:
        _serving(stack)
        stack.publish(good("db", sizes.requests), rate_per_s=sizes.rate_per_s)
        _mid_stream(stack, sizes)
        cut_at = time.monotonic()
        before = stack.rss_mb(cut_at - 5, cut_at)
        stack.proxy.cut()
        time.sleep(sizes.outage_s)  # the fault's length, not a synchronization
        stack.proxy.restore()
        restored = time.monotonic()
        during = stack.rss_mb(cut_at, restored)
        row = _account(
            stack, "PostgreSQL unreachable", "db", sizes.requests, sizes, f"{sizes.outage_s:g} s"
        )
        row.recovery_s = stack.progress.recovery_s(restored)
        if before and during:
            row.notes.append(f"RSS in outage / before: {max(during) / max(before):.2f}")
        return row


def broker_freeze(workdir: Path, sizes: Sizes) -> Row:
    with Stack(workdir) as stack:
        _serving(stack)
        stack.publish(good("freeze", sizes.requests), rate_per_s=sizes.rate_per_s)
        _mid_stream(stack, sizes)
        pid = stack.broker.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(sizes.freeze_s)  # the fault's length
        finally:
            os.kill(pid, signal.SIGCONT)
        thawed = time.monotonic()
        row = _account(
            stack, "broker frozen", "freeze", sizes.requests, sizes, f"{sizes.freeze_s:g} s"
        )
        row.recovery_s = stack.progress.recovery_s(thawed)
        return row


def join_and_leave(workdir: Path, sizes: Sizes) -> Row:
    with Stack(workdir) as stack:
        _serving(stack)
        stack.publish(good("join", sizes.requests), rate_per_s=sizes.rate_per_s)
        _mid_stream(stack, sizes)
        second = stack.start_worker()
        joined = time.monotonic()
        time.sleep(sizes.dwell_s)  # the second worker's stay
        second.stop()  # SIGTERM: it drains and leaves the group
        left = time.monotonic()
        row = _account(
            stack,
            "worker joins, leaves",
            "join",
            sizes.requests,
            sizes,
            f"stays {sizes.dwell_s:g} s",
        )
        row.recovery_s = _worst(stack, [joined, left])
        return row


def hostile(workdir: Path, sizes: Sizes) -> Row:
    bad = hostile_records(sizes.hostile, random_seed=sizes.seed)
    fine = good("fine", sizes.hostile)
    mixed = [r for pair in zip(bad, fine, strict=True) for r in pair]
    with Stack(workdir) as stack:
        stack.start_worker()
        stack.publish(mixed, rate_per_s=max(sizes.rate_per_s, len(mixed) / 20))
        row = _account(stack, "hostile records", "fine", len(fine), sizes, f"{len(bad)} hostile")
        stack.published()
        deadline = time.monotonic() + sizes.settle_s
        while True:  # records of other partitions may still be on their way
            letters = dead_letters(stack.broker.bootstrap, TOPICS.dead_letters)
            unaccounted = set(stack.offsets) - stack.progress.sources() - letters.sources
            if not unaccounted or time.monotonic() > deadline:
                break
            time.sleep(1.0)
        row.lost += len(unaccounted)
        row.records = len(mixed)
        codes = ", ".join(f"{code} {n}" for code, n in letters.codes.most_common())
        row.notes.append(f"{sum(letters.codes.values())} dead letters ({codes})")
        row.lost += letters.without_reason  # a dead letter must say why
        row.exits = stack.unexpected_exits()
        return row


def hung_model(workdir: Path, sizes: Sizes) -> Row:
    with Stack(workdir, hang_timeout_s=sizes.hang_timeout_s) as stack:
        _serving(stack)
        stack.publish(good("hung", sizes.requests), rate_per_s=sizes.rate_per_s)
        _mid_stream(stack, sizes)
        hang = [_hang_request(i, hangs=i == 3) for i in range(20)]
        stack.publish(hang, rate_per_s=1000)
        hung_at = time.monotonic()
        row = _account(
            stack,
            "model hangs",
            "hung",
            sizes.requests,
            sizes,
            f"timeout {sizes.hang_timeout_s:g} s",
        )
        stack.progress.wait_for(sizes.requests + len(hang), 60)
        answered = stack.progress.ids("hang-")
        row.lost += len(hang) - len(answered)
        row.records = sizes.requests + len(hang)
        row.recovery_s = stack.progress.longest_stall_s(hung_at)
        row.notes.append(f"hang-3: {stack.progress.error_code('hang-3')}")
        return row


def _hang_request(i: int, *, hangs: bool) -> Record:
    request_id = f"hang-{i}"
    body = {"request_id": request_id, "model": "hang", "inputs": [7.0 if hangs else i, 1, 2, 3]}
    return request_id.encode(), orjson.dumps(body)


SCENARIOS = {
    "sigkill": sigkills,
    "database": database_outage,
    "broker": broker_freeze,
    "rebalance": join_and_leave,
    "hostile": hostile,
    "hung": hung_model,
}


def _serving(stack: Stack) -> None:
    """Start a worker and wait until it has served a few requests."""
    stack.start_worker()
    stack.publish(good("warm", WARM), rate_per_s=1000)
    if not stack.progress.wait_for(WARM, 180):
        raise RuntimeError(f"the worker did not start serving; see {stack.workdir}")


def _mid_stream(stack: Stack, sizes: Sizes) -> None:
    """A third of the way through publishing the stream (the worker keeps up with it)."""
    time.sleep(sizes.requests / sizes.rate_per_s / 3)


def _account(stack: Stack, name: str, prefix: str, n: int, sizes: Sizes, note: str) -> Row:
    """Wait until every expected id has a SQL row (or the settle time passes), then count."""
    deadline = time.monotonic() + sizes.settle_s
    found: set[str] = set()
    while time.monotonic() < deadline:
        found = stack.progress.ids(prefix + "-")
        if len(found) >= n:
            break
        time.sleep(0.5)
    counts = result_counts(stack.broker.bootstrap, TOPICS.results, found, 120)
    # Over the expected ids only: distinct hostile records may share a key, and a record
    # that cannot be decoded is answered under its key.
    repeats = sum(counts[rid] for rid in found) - len(found)
    return Row(
        scenario=name,
        records=n,
        lost=n - len(found),
        sql_duplicates=stack.progress.sql_duplicates(),
        kafka_duplicates=repeats,
        recovery_s=None,
        peak_rss_mb=stack.peak_rss_mb(),
        exits=stack.unexpected_exits(),
        notes=[note],
    )


def _worst(stack: Stack, fault_ends: list[float]) -> float | None:
    times = [stack.progress.recovery_s(t) for t in fault_ends]
    known = [t for t in times if t is not None]
    return max(known) if known else None
