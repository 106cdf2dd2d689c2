"""``python -m bench.rollout [--interval S] [--rate N] [--out FILE.png]``

A rollout, live: the embedded broker, one worker, SQLite, and a steady stream of
labelled digits requests. First a worse candidate (noisy weights) goes canary and is
rolled back; then an equivalent one (the same weights) goes through every step to
100%. Every half second the candidate's share and the worker's gate values (each
with its confidence sequence) are sampled; the PNG draws them over time with the
decisions marked, and the terminal gets each decision and how long the rollback took
after the candidate's first answer.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display needed
import matplotlib.pyplot as plt
from rich.console import Console
from rich.table import Table
from sqlalchemy import func, select

from bench.rollout_models import ensure_rollout_models
from consumers.client import InferlaneClient
from storage.rollouts import RolloutEvent, RolloutRecord, RolloutStore
from storage.schema import inference_results
from worker.demo.workload import digits_requests
from worker.facade import Worker
from worker.intake.broker import EmbeddedBroker
from worker.models import ModelRegistry
from worker.rollout.begin import begin
from worker.settings import OpsConfig, RolloutConfig, WorkerSettings
from worker.settings.rollout_plan import RolloutPlan

console = Console()
GATES = ("disagreement", "label_error_increase", "error_rate_increase")


@dataclass
class Trace:
    """Samples over time (seconds since the run began) and the rollouts' decisions."""

    t: list[float] = field(default_factory=list)
    share: list[float] = field(default_factory=list)  # percent
    # Per gate: its estimate and its confidence sequence's ends, sample by sample.
    gates: dict[str, list[float]] = field(default_factory=lambda: {g: [] for g in GATES})
    lows: dict[str, list[float]] = field(default_factory=lambda: {g: [] for g in GATES})
    highs: dict[str, list[float]] = field(default_factory=lambda: {g: [] for g in GATES})
    thresholds: dict[str, float] = field(default_factory=dict)  # the limits: pass below
    allowed: dict[str, float] = field(default_factory=dict)  # fail above
    runs: list[tuple[RolloutRecord, list[RolloutEvent], float]] = field(default_factory=list)
    t0_wall: float = 0.0  # the wall clock at t = 0


@contextlib.asynccontextmanager
async def traffic(bootstrap: str, rate: int) -> AsyncIterator[None]:
    """Labelled digits requests at about ``rate`` per second, in tenths of a second."""
    stop = asyncio.Event()

    async def publish() -> None:
        sent = 0
        with InferlaneClient(bootstrap) as client:
            while not stop.is_set():
                chunk = digits_requests(max(1, rate // 10), prefix=f"r{sent}")
                await asyncio.to_thread(client.publish, chunk)
                sent += len(chunk)
                await asyncio.sleep(0.1)

    task = asyncio.create_task(publish())
    try:
        yield
    finally:
        stop.set()
        await task


def gate_values(worker: Worker, candidate: str, metric: str) -> dict[str, float]:
    """One of the gates' series (value, low, high) as the worker judged them last for
    this candidate (NaN: no data)."""
    out = dict.fromkeys(GATES, float("nan"))
    for family in worker.metrics.registry.collect():
        if family.name == f"inferlane_rollout_gate_{metric}":
            for s in family.samples:
                if s.labels["candidate"] == candidate and s.labels["gate"] in out:
                    out[s.labels["gate"]] = s.value
    return out


async def follow(
    worker: Worker, store: RolloutStore, rollout: RolloutRecord, trace: Trace, t0: float
) -> RolloutRecord:
    """Sample until the rollout ends; the candidate's share in percent."""
    while True:
        record = await asyncio.to_thread(store.get, rollout.id)
        assert record is not None
        trace.t.append(time.monotonic() - t0)
        trace.share.append(record.share * 100 if record.state == "running" else 0.0)
        if record.state == "promoted":
            trace.share[-1] = 100.0
        for metric, series in (("value", trace.gates), ("low", trace.lows), ("high", trace.highs)):
            for gate, value in gate_values(worker, rollout.candidate_version, metric).items():
                series[gate].append(value)
        if record.state != "running":
            return record
        await asyncio.sleep(0.5)


def first_answer(worker: Worker, version: str) -> float | None:
    """Seconds from the epoch of the version's first result row."""
    assert worker.store is not None
    with worker.store.engine.connect() as conn:
        first = conn.execute(
            select(func.min(inference_results.c.created_at)).where(
                inference_results.c.model_version == version
            )
        ).scalar_one()
    if first is None:
        return None
    return (first if first.tzinfo else first.replace(tzinfo=UTC)).timestamp()


async def run(interval_s: float, rate: int) -> Trace:
    registry_path = ensure_rollout_models()
    registry = ModelRegistry.from_toml(registry_path)
    plan = RolloutPlan(steps=[5, 25, 50, 100], interval_s=interval_s, passes=1, sample=0.5)
    trace = Trace(
        thresholds={g: getattr(plan.gates, f"max_{g}") for g in GATES},
        allowed={g: getattr(plan.gates, f"allowed_{g}") for g in GATES},
    )
    with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker() as broker:
        settings = WorkerSettings(
            bootstrap=broker.bootstrap,
            database_url=f"sqlite:///{Path(tmp) / 'rollout.db'}",
            ops=OpsConfig(http_port=0),
            rollout=RolloutConfig(poll_s=0.5),
        )
        async with Worker(settings, registry) as worker:
            assert worker.store is not None
            store = RolloutStore(worker.store.engine)
            t0, trace.t0_wall = time.monotonic(), time.time()
            async with traffic(broker.bootstrap, rate):
                await asyncio.sleep(3.0)  # the primary alone
                for version in ("worse", "2"):
                    console.print(f"canary: digits {version}, interval {interval_s:g} s")
                    candidate = registry.candidates()[f"digits@{version}"]
                    started = begin(store, registry.spec("digits"), candidate, plan)
                    with console.status(f"following the rollout of digits {version}"):
                        ended = await follow(worker, store, started, trace, t0)
                    console.print(f"  {ended.state}: {ended.reason}")
                    first = await asyncio.to_thread(first_answer, worker, version)
                    after = ended.updated_at.timestamp() - first if first else float("nan")
                    events = await asyncio.to_thread(store.events, started.id)
                    trace.runs.append((ended, events, after))
                    await asyncio.sleep(2.0)
    return trace


def draw(trace: Trace, out: Path) -> None:
    fig, axes = plt.subplots(len(GATES) + 1, 1, figsize=(10, 9), sharex=True)
    axes[0].step(trace.t, trace.share, where="post", color="tab:blue")
    axes[0].set_ylabel("candidate share (%)")
    axes[0].set_ylim(-5, 105)
    for gate, ax in zip(GATES, axes[1:], strict=True):
        ax.fill_between(
            trace.t, trace.lows[gate], trace.highs[gate], alpha=0.25, label="confidence sequence"
        )
        ax.plot(trace.t, trace.gates[gate], ".-", ms=3, label=gate)
        ax.axhline(trace.thresholds[gate], color="tab:green", ls="--", label="passes below")
        ax.axhline(trace.allowed[gate], color="tab:red", ls="--", label="fails above")
        limit = trace.thresholds[gate]
        ax.set_ylim(-2 * limit, 4 * limit)  # the band starts wide: show the decision zone
        ax.set_ylabel(gate.replace("_", " "))
        ax.legend(loc="upper right", fontsize=8)
    for ended, events, _ in trace.runs:
        for e in events:
            if e.decision in ("start", "advance", "promote", "rollback"):
                x = e.at.timestamp() - trace.t0_wall
                color = {"rollback": "tab:red", "promote": "tab:green"}.get(e.decision, "gray")
                for ax in axes:
                    ax.axvline(x, color=color, alpha=0.4, lw=1)
                label = f"{e.decision} {ended.candidate_version}"
                axes[0].annotate(label, (x, 102), fontsize=7, rotation=90, va="top")
    axes[-1].set_xlabel("seconds")
    fig.suptitle("digits rollouts: a worse candidate rolled back, an equivalent one promoted")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def report(trace: Trace) -> None:
    table = Table(title="rollout decisions")
    for column in ("candidate", "decision", "share", "at (s after start)", "reason"):
        table.add_column(column)
    for ended, events, _ in trace.runs:
        start = events[0].at
        for e in events:
            table.add_row(
                ended.candidate_version,
                e.decision,
                f"{e.share:.0%}",
                f"{(e.at - start).total_seconds():.1f}",
                e.reason or "",
            )
    console.print(table)
    for ended, events, after in trace.runs:
        took = (events[-1].at - events[0].at).total_seconds()
        console.print(
            f"digits {ended.candidate_version}: {ended.state} {took:.1f} s after its start, "
            f"{after:.1f} s after its first answer (interval {ended.interval_s:g} s)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.rollout", description=__doc__)
    parser.add_argument("--interval", type=float, default=10.0, help="analysis interval (s)")
    parser.add_argument("--rate", type=int, default=200, help="requests per second")
    parser.add_argument("--out", type=Path, default=Path("docs/rollout-demo.png"))
    args = parser.parse_args()
    trace = asyncio.run(run(args.interval, args.rate))
    report(trace)
    draw(trace, args.out)
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
