"""``python -m bench [--quick | --smoke] [--out DIR] [--docs]``: every scenario, side by side."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from bench import docs, report
from bench.gc_hold import without_full_passes
from bench.measure import Steal
from bench.plan import FULL, PLANS, Plan
from bench.scenarios import (
    ceiling,
    high_cost,
    low_load,
    overhead,
    priority,
    soak,
    sparse_priority,
    step_load,
    throughput,
)
from bench.scenarios.common import Context, Measured

if TYPE_CHECKING:
    from worker.models import ModelRegistry

SCENARIOS = (
    "ceiling",
    "naive",
    "threadpool",
    "inferlane",
    "priority",
    "sparse_priority",
    "low_load",
    "soak",
    "ops",
    "drift",
    "step_load",
    "high_cost",
)  # step_load, high_cost: opt-in (--only ...), not in any default set
console = Console()


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="every scenario, under 3 minutes")
    size.add_argument("--smoke", action="store_true", help="digits only, tiny (CI)")
    parser.add_argument("--out", type=Path, default=Path("bench/out"), help="output folder")
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=min(2, os.cpu_count() or 1),
        help="torch intra-op threads, the same for every scenario",
    )
    parser.add_argument(
        "--only",
        default=None,
        help=f"comma-separated subset of: {', '.join(SCENARIOS)} "
        "(default: all; --smoke: the first four)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="py-spy the worker in its throughput runs (profile-*.txt)",
    )
    parser.add_argument(
        "--worker-args", default="", help='extra `inferlane run` flags, e.g. "--max-batch 32"'
    )
    parser.add_argument("--models", default=None, help="comma-separated: digits,minilm")
    parser.add_argument(
        "--docs",
        action="store_true",
        help="also write the tables into docs/BENCHMARKS.md and README.md (between their "
        "bench markers) and copy the PNGs into docs/",
    )
    return parser.parse_args(argv)


def _plan(args: argparse.Namespace) -> Plan:
    plan = PLANS["smoke"] if args.smoke else PLANS["quick"] if args.quick else FULL
    if args.models:
        plan = dataclasses.replace(plan, models=tuple(args.models.split(",")))
    return plan


def _machine() -> dict[str, Any]:
    import psutil
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(ln.split(":", 1)[1].strip() for ln in info if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def _commit() -> str:
    """The checkout's commit, ``-dirty`` when it has uncommitted changes."""
    try:
        git = ["git", "describe", "--always", "--dirty"]
        return (
            subprocess.run(git, cwd=docs.REPO, capture_output=True, text=True).stdout.strip()
            or "unknown"
        )
    except OSError:
        return "unknown"


def _load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


@functools.cache
def _registry(torch_threads: int) -> ModelRegistry:
    """The demo models, loaded in the harness process for the ceiling."""
    import torch

    from worker.demo.models import ensure_demo_models
    from worker.models import ModelRegistry

    torch.set_num_threads(torch_threads)
    return ModelRegistry.from_toml(ensure_demo_models())


def _ceilings(ctx: Context) -> dict[str, dict[str, Any]]:
    registry = _registry(ctx.torch_threads)
    return {model: ceiling.measure(ctx, registry, model) for model in ctx.plan.models}


def _beside_ceiling(
    ctx: Context, ceilings: dict[str, dict[str, Any]], model: str
) -> Callable[[], Measured]:
    """inferlane's throughput run with the ceiling's best batch timed again just before
    and just after it (``extra["ceiling_beside_rps"]``: their mean)."""

    def step() -> Measured:
        registry, best = _registry(ctx.torch_threads), ceilings[model]["best_batch"]
        before = ceiling.again(ctx, registry, model, best)
        measured = throughput.run(ctx, model, "inferlane")
        after = ceiling.again(ctx, registry, model, best)
        ctx.say(
            f"  ceiling {model} batch {best} again: {before:,.0f}/s before, {after:,.0f}/s after"
        )
        measured.extra.update(
            ceiling_before_rps=before,
            ceiling_after_rps=after,
            ceiling_beside_rps=(before + after) / 2,
        )
        return measured

    return step


def run(ctx: Context, only: set[str]) -> tuple[dict[str, dict[str, Any]], list[Measured]]:
    """Every selected scenario in turn; each system under test runs alone."""
    steps: list[tuple[str, Callable[[], Any]]] = []
    measured: list[Measured] = []
    ceilings: dict[str, dict[str, Any]] = {}
    if "ceiling" in only:
        steps.append(("ceiling", lambda: ceilings.update(_ceilings(ctx))))
    for model in ctx.plan.models:
        for system in ctx.plan.systems:
            if system not in only:
                continue
            if system == "inferlane" and "ceiling" in only:
                step = _adder(measured, _beside_ceiling(ctx, ceilings, model))
            else:
                step = _adder(measured, throughput.run, ctx, model, system)
            steps.append((f"{model} {system}", step))
    if "priority" in only:
        steps.append(
            ("priority", lambda: measured.extend(priority.run(ctx, _inferlane_rps(measured))))
        )
    if "sparse_priority" in only:
        sparse = sparse_priority.run
        steps.append(
            ("sparse priority", lambda: measured.extend(sparse(ctx, _inferlane_rps(measured))))
        )
    if "low_load" in only:
        steps.append(("low load", _adder(measured, low_load.run, ctx)))
    if "soak" in only:
        steps.append(("soak", _adder(measured, soak.run, ctx)))
    for feature in overhead.FEATURES:  # opt-in: --only ops,drift
        if feature in only:
            steps.append((f"{feature} overhead", _adder(measured, overhead.run, ctx, feature)))
    if "step_load" in only:
        steps.append(("step load", _adder(measured, step_load.run, ctx)))
    if "high_cost" in only:
        steps.append(("high cost", _adder(measured, high_cost.run, ctx)))
    for i, (name, step) in enumerate(steps, 1):
        started = time.monotonic()
        # The harness times requests on its own event loop. With CPython's rule, full
        # collector passes over what it had imported (torch among it) stopped that loop
        # 120-156 ms every ~0.4 s of a priority run, inside the latencies it measured.
        with console.status(f"[{i}/{len(steps)}] {name}"), without_full_passes():
            step()
        console.print(f"[dim][{i}/{len(steps)}] {name}: {time.monotonic() - started:.0f}s[/]")
    return ceilings, measured


def _inferlane_rps(measured: list[Measured]) -> dict[str, float]:
    """inferlane's throughput per model earlier in this run, to size priority backlogs."""
    return {
        m.model: m.throughput_rps
        for m in measured
        if (m.scenario, m.system) == ("throughput", "inferlane")
    }


def _adder(into: list[Measured], fn: Callable[..., Any], *args: Any) -> Callable[[], None]:
    def step() -> None:
        got = fn(*args)
        into.extend(got if isinstance(got, list) else [got])

    return step


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    plan = _plan(args)
    only = set(args.only.split(",") if args.only else plan.default_scenarios)
    if unknown := only - set(SCENARIOS):
        raise SystemExit(f"unknown scenarios: {', '.join(sorted(unknown))}")
    if args.docs:  # the markers are there before an hour's run, not after it
        docs.check(docs.REPO / "docs", docs.REPO / "README.md")
    args.out.mkdir(parents=True, exist_ok=True)
    ctx = Context(
        plan,
        args.out,
        args.torch_threads,
        say=console.print,
        profile=args.profile,
        worker_args=tuple(shlex.split(args.worker_args)),
    )
    meta: dict[str, Any] = {
        "mode": plan.mode,
        "command": shlex.join(["python", "-m", "bench", *(sys.argv[1:] if argv is None else argv)]),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "commit": _commit(),
        "torch_threads": args.torch_threads,
        "worker_args": args.worker_args,
        "machine": _machine(),
        "load_avg_start": _load_avg(),
        "plan": dataclasses.asdict(plan),
    }
    console.print(
        f"bench [bold]{plan.mode}[/]: {meta['machine']['cpu']}, "
        f"{meta['machine']['cores']} cores, {args.torch_threads} torch threads"
    )
    started, steal = time.monotonic(), Steal()
    ceilings, measured = run(ctx, only)
    meta["duration_s"] = round(time.monotonic() - started, 1)
    meta["load_avg_end"] = _load_avg()
    meta["cpu_steal_share"] = steal.share()
    scenarios = report.scenarios_json(ceilings, measured)
    ratios = report.ratios(scenarios)
    doc = report.finite(
        {"meta": meta, "scenarios": scenarios, "ratios": ratios, "targets": report.targets(ratios)}
    )
    report.write_json(args.out / "results.json", doc)
    report.plot(args.out / "results.png", doc)
    summary = report.markdown(doc)
    (args.out / "summary.md").write_text(summary)
    console.print(summary)
    console.print(
        f"wrote {args.out / 'results.json'}, results.png, summary.md in {meta['duration_s']:.0f}s"
    )
    if args.docs:
        docs.write(doc, args.out, docs.REPO / "docs", docs.REPO / "README.md")
        console.print("wrote docs/BENCHMARKS.md's results, its PNGs and README's Performance")
    return 0


if __name__ == "__main__":
    sys.exit(main())
