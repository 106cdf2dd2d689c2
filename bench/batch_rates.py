"""``python -m bench.batch_rates``: how much one batch's rate varies from batch to batch,
in items/s and in work/s (the batch controller's rate, ``worker.scheduling.curve``).

A saturating backlog of the model's demo workload waits in one lane (kept at
``--backlog`` items); batches are taken as the lanes take them (for text: the oldest
item and those closest to it in tokens) and run one after another in one thread.
Per batch size: the mean and the relative standard deviation of each rate.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections.abc import Iterator

import torch
from rich.console import Console
from rich.progress import track
from rich.table import Table

from consumers.contract import InferenceRequest, Priority
from consumers.records import RawRecord, SourceRef
from worker.base.pending import Pending
from worker.demo.models import ensure_demo_models
from worker.demo.workload import digits_requests, minilm_requests
from worker.models import LoadedModel, ModelRegistry
from worker.scheduling.lanes import Lane


def _pending(model: LoadedModel, requests: Iterator[InferenceRequest]) -> Iterator[Pending]:
    for offset, request in enumerate(requests):
        item = model.adapter.prepare(request.inputs)
        record = RawRecord(SourceRef("bench", 0, offset), None, None, time.monotonic())
        yield Pending(request, item, model.adapter.cost(item), Priority.NORMAL, record, None)


def rates(
    model: LoadedModel, name: str, size: int, seconds: float, backlog: int
) -> tuple[list[float], list[float]]:
    """Items/s and work/s of each batch of ``size`` run in ``seconds``."""
    workload = minilm_requests(512) if name == "minilm" else digits_requests(512)
    source = _pending(model, itertools.cycle(workload))
    lane = Lane(Priority.NORMAL, capacity=backlog)
    items_s: list[float] = []
    work_s: list[float] = []
    grouped = model.adapter.variable_cost
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        while len(lane) < backlog:
            lane.push(next(source))
        batch = lane.take(name, size, group_by_cost=grouped)
        started = time.perf_counter()
        model.run([p.item for p in batch])
        took = time.perf_counter() - started
        items_s.append(len(batch) / took)
        work_s.append(sum(p.cost for p in batch) / took)
    return items_s, work_s


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.batch_rates", description=__doc__)
    parser.add_argument("--model", default="minilm", choices=["minilm", "digits"])
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--seconds", type=float, default=25.0, help="per size")
    parser.add_argument("--backlog", type=int, default=1000)
    parser.add_argument("--torch-threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.torch_threads)
    registry = ModelRegistry.from_toml(ensure_demo_models())
    registry.warmup(args.model)
    model = registry.get(args.model)
    table = Table(title=f"{args.model}: one batch's rate, {args.torch_threads} torch thread(s)")
    for column in ("size", "batches", "items/s", "items/s rel. sd", "work/s", "work/s rel. sd"):
        table.add_column(column, justify="right")
    for size in track(args.sizes, description="batch sizes"):
        items_s, work_s = rates(model, args.model, size, args.seconds, args.backlog)
        row = [str(size), str(len(items_s))]
        for values in (items_s, work_s):
            mean = statistics.mean(values)
            row += [f"{mean:,.1f}", f"{statistics.stdev(values) / mean:.3f}"]
        table.add_row(*row)
    Console().print(table)


if __name__ == "__main__":
    main()
