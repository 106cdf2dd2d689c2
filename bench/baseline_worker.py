"""``python -m bench.baseline_worker {single-lane,naive} --bootstrap B --database URL ...``:
the worker as ``inferlane run`` starts it (the same flags), with a baseline in place of
its own scheduling, for the scenarios that compare against one:

- ``single-lane``: every request in one FIFO lane, whatever its topic (``priority``);
- ``naive``: the batch cap follows the practitioners' utilization rule alone, which
  collapses under a backlog (``step_load``).

The worker takes these through ``Worker(lanes=..., policy=...)``; no setting names them.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from worker.cli.main import settings_from_flags
from worker.cli.registry import load_registry
from worker.launch import serve, tune_process
from worker.ops.logs import configure
from worker.scheduling.lanes import Lanes
from worker.settings import WorkerSettings

# What each baseline passes to the worker.
BASELINES: dict[str, Callable[[WorkerSettings], dict[str, Any]]] = {
    "single-lane": lambda s: {"lanes": Lanes(s.lanes.capacity, single_lane=True)},
    "naive": lambda s: {"policy": "naive"},
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.baseline_worker")
    parser.add_argument("baseline", choices=sorted(BASELINES))
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--database", required=True)
    parser.add_argument("--models", type=Path)
    parser.add_argument("--group-id")
    parser.add_argument("--max-batch", type=int)
    parser.add_argument("--max-wait-ms", type=float)
    parser.add_argument("--partitions", type=int)
    parser.add_argument("--torch-threads", type=int)
    parser.add_argument("--http-port", type=int)
    parser.add_argument("--http-host")
    parser.add_argument("--log-format", default="text", choices=("text", "json"))
    args = parser.parse_args(argv)
    configure(args.log_format)
    settings = settings_from_flags(
        bootstrap=args.bootstrap,
        database_url=args.database,
        models=args.models,
        group_id=args.group_id,
        max_batch=args.max_batch,
        max_wait_ms=args.max_wait_ms,
        partitions=args.partitions,
        torch_threads=args.torch_threads,
        http_port=args.http_port,
        http_host=args.http_host,
    )
    tune_process(settings)
    registry = load_registry(settings.models, settings.device)
    asyncio.run(serve(settings, registry, **BASELINES[args.baseline](settings)))


if __name__ == "__main__":
    main()
