"""``python -m bench.drift_cost``: the drift tracker's CPU time per request, in process.

A digits batch of 256 real outcomes (classifier output, 64 features, labels) goes
through ``observe`` and the window accumulator's ``add``, as the event loop does for
every finished batch, and the accumulator counts them at ``take`` as the tracker's flush
does; the cost per request is set beside the worker's per-request budget at a given
throughput.
Steadier than two end-to-end runs on a shared machine, whose noise exceeds 5%.
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime

import numpy as np
from pydantic import JsonValue

from consumers.contract import InferenceRequest, Priority
from consumers.records import RawRecord, SourceRef
from worker.base.outcomes import completed
from worker.base.pending import Batch, BatchRun, ItemResult, Pending
from worker.drift.accumulate import WindowAccumulator
from worker.drift.observe import observe
from worker.models import ClassifierAdapter


def digits_batch(n: int) -> tuple[Batch, BatchRun, ClassifierAdapter]:
    adapter = ClassifierAdapter(64, 10)
    rng = np.random.default_rng(0)
    items = []
    for i in range(n):
        request = InferenceRequest(
            request_id=f"r{i}", model="digits", inputs=rng.random(64).tolist(), expected=i % 10
        )
        record = RawRecord(SourceRef("t", 0, i), None, b"{}", 0.0)
        items.append(
            Pending(request, adapter.prepare(request.inputs), 1, Priority.NORMAL, record, None)
        )
    probs: list[JsonValue] = [float(p) for p in np.full(10, 0.1)]
    results = [ItemResult(outputs={"label": i % 10, "probs": probs}) for i in range(n)]
    return Batch("digits", items, 0.0), BatchRun(results, "1", 0.0, 0.001), adapter


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.drift_cost", description=__doc__)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--batches", type=int, default=400)
    parser.add_argument("--throughput", type=float, default=6403.0, help="requests/s")
    args = parser.parse_args()
    batch, run, adapter = digits_batch(args.batch)
    outcomes = completed(batch, run, adapter)
    acc = WindowAccumulator(window_s=60, reference_rows=500, bins=10)
    now = datetime.now(UTC)
    started = time.process_time()
    for _ in range(args.batches):
        obs = observe(batch, outcomes, adapter)
        assert obs is not None
        acc.add(obs, now)
    acc.take()
    per_request_us = (time.process_time() - started) / (args.batches * args.batch) * 1e6
    budget_us = 1e6 / args.throughput
    print(
        f"drift: {per_request_us:.2f} us CPU per request; at {args.throughput:,.0f} requests/s "
        f"a request has {budget_us:.0f} us: {per_request_us / budget_us:.1%} of it"
    )


if __name__ == "__main__":
    main()
