"""Where the worker's memory grows: the soak, in-process, under ``tracemalloc``.

``python -m bench.memory [--requests 100000]`` runs the worker in this process on an
embedded broker, feeds it a digits backlog, snapshots Python allocations at the end
of warm-up (a quarter of the results) and at the end, and prints the lines whose
allocations grew most. tracemalloc slows Python down: read sizes, not speed. It sees
Python allocations only; growth outside them (glibc arenas, torch) shows as the
difference between RSS growth and traced growth.
"""

from __future__ import annotations

import argparse
import asyncio
import tracemalloc
from pathlib import Path

import psutil
import torch

from bench import workloads
from bench.kafka_io import TOPICS, ResultsReader, create_topics, publish
from worker.demo.models import ensure_demo_models
from worker.facade import Worker
from worker.intake.broker import EmbeddedBroker
from worker.models import ModelRegistry
from worker.settings import WorkerSettings


async def _soak(n: int, db: Path, top: int) -> None:
    registry = ModelRegistry.from_toml(ensure_demo_models())
    proc = psutil.Process()
    with EmbeddedBroker() as broker:
        await create_topics(broker.bootstrap)
        settings = WorkerSettings(bootstrap=broker.bootstrap, database_url=f"sqlite:///{db}")
        await publish(broker.bootstrap, TOPICS.normal, workloads.records("digits", n, prefix="mem"))
        reader = await ResultsReader(broker.bootstrap).start()
        tracemalloc.start(1)
        async with Worker(settings, registry):
            while reader.count < n // 4:
                await reader.poll()
            reader.arrivals.clear()  # the reader's own buffers are not the worker's
            warm, rss_warm = tracemalloc.take_snapshot(), proc.memory_info().rss
            while reader.count < n:
                await reader.poll()
                reader.arrivals.clear()
            end, rss_end = tracemalloc.take_snapshot(), proc.memory_info().rss
        await reader.stop()
    traced = sum(s.size_diff for s in end.compare_to(warm, "filename"))
    print(
        f"RSS {rss_warm / 2**20:.0f} -> {rss_end / 2**20:.0f} MiB "
        f"({(rss_end - rss_warm) / 2**20:+.0f} MiB); traced Python {traced / 2**20:+.1f} MiB"
    )
    for stat in end.compare_to(warm, "traceback")[:top]:
        print(f"{stat.size_diff / 2**20:+8.2f} MiB {stat.count_diff:+9d} blocks")
        for line in stat.traceback.format():
            print("    " + line)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.memory")
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--db", type=Path, default=Path("bench/out/memory.db"))
    args = parser.parse_args()
    torch.set_num_threads(2)
    args.db.parent.mkdir(parents=True, exist_ok=True)
    args.db.unlink(missing_ok=True)
    asyncio.run(_soak(args.requests, args.db, args.top))


if __name__ == "__main__":
    main()
