"""``python -m bench.jobs_ray``: the Ray Data entry point beside plain ``map_batches``.

A local Ray instance (``--cpus``, default 2) reads a Parquet file of digits rows, cut into
eight blocks per actor, and runs ``map_batches`` with ``--actors`` actors, each running
``--calls-per-actor`` batches at once (default 1), three ways, in turn, ``--rounds``
times:

- plain: the exported digits program loaded by hand (``torch.export.load``), forward and
  softmax per batch, label and probabilities out: what a Ray user writes first;
- the entry point (``worker.jobs.ray_data.Scorer``) without SQL rows: the model store,
  the job path's checks, batch controller and output columns;
- the entry point with its result and drift rows in PostgreSQL (a fresh database per
  run), then a check that every row id has exactly one result row.

Each figure is rows over the wall time of the whole ``map_batches`` run, actor start-up
(loading the model) included, the same for the three; beside it, the machine's busy
share of its cores over the run (whatever else runs there included). Needs ``pip install
'inferlane[ray]'``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import ray
import torch

from bench.jobs import digits_parquet
from bench.jobs_scaleout import CpuUse, pg_database, stored_rows
from worker.cli.registry import load_registry
from worker.demo.models import ensure_demo_models
from worker.jobs.ray_data import Scorer


class ByHand:
    """The digits program, loaded by hand: one forward pass per batch."""

    def __init__(self, path: str, torch_threads: int) -> None:
        torch.set_num_threads(torch_threads)
        self._module = torch.export.load(path).module()

    def __call__(self, batch: pa.Table) -> pa.Table:
        inputs = batch.column("inputs").combine_chunks()
        x = inputs.values.to_numpy().reshape(len(batch), -1).astype(np.float32)
        with torch.inference_mode():
            probs = torch.softmax(self._module(torch.from_numpy(x)), dim=1).numpy()
        return pa.table(
            {
                "row": batch.column("id"),
                "predicted_label": pa.array(probs.argmax(axis=1)),
                "probs": pa.FixedSizeListArray.from_arrays(pa.array(probs.ravel()), probs.shape[1]),
            }
        )


def _timed(
    ds: ray.data.Dataset, fn: type, kwargs: dict[str, Any], args: Any
) -> tuple[float, float]:
    """Rows per second, and the machine's busy share over the run."""
    use = CpuUse([])
    started = time.perf_counter()
    scored = ds.map_batches(
        fn,
        fn_constructor_kwargs=kwargs,
        batch_format="pyarrow",
        batch_size=args.batch_size,
        compute=ray.data.ActorPoolStrategy(
            size=args.actors,
            max_concurrent_calls_per_actor=args.calls_per_actor,
            enable_true_multi_threading=args.calls_per_actor > 1,
        ),
    )
    rows = scored.count()
    elapsed = time.perf_counter() - started
    assert rows == args.rows, (rows, args.rows)
    return rows / elapsed, use.report()["machine_busy_share"]


def _once_in_sql(url: str, rows: int) -> bool:
    total, distinct, drift = stored_rows(url)
    return total == distinct == drift == rows


def one_round(ds: ray.data.Dataset, models: Path, args: Any, n: int) -> dict[str, Any]:
    registry = load_registry(models)
    path = str(registry.spec("digits").path)
    entry = {
        "model": "digits",
        "job": f"ray{n}",
        "id_column": "id",
        "label_column": "label",
        "models": str(models),
        "torch_threads": args.torch_threads,
    }
    plain, plain_busy = _timed(
        ds, ByHand, {"path": path, "torch_threads": args.torch_threads}, args
    )
    no_sql, no_sql_busy = _timed(ds, Scorer, {**entry, "sql_results": False}, args)
    with pg_database() as url:
        with_sql, with_sql_busy = _timed(ds, Scorer, {**entry, "database": url}, args)
        once = _once_in_sql(url, args.rows)
    return {
        "plain_rows_per_s": round(plain),
        "entry_no_sql_rows_per_s": round(no_sql),
        "entry_with_postgres_rows_per_s": round(with_sql),
        "every_row_once_in_sql": once,
        "no_sql_vs_plain": round(no_sql / plain, 3),
        "with_sql_vs_plain": round(with_sql / plain, 3),
        "machine_busy_share": [plain_busy, no_sql_busy, with_sql_busy],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.jobs_ray", description=__doc__)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--actors", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=4096)
    parser.add_argument(
        "--calls-per-actor",
        type=int,
        default=1,
        help="batches each actor runs at once (Ray's max_concurrent_calls_per_actor)",
    )
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("bench/out"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    models = ensure_demo_models()
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    rounds = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
            source = digits_parquet(Path(tmp) / "digits.parquet", args.rows)
            blocks = args.actors * 8  # so that every actor has blocks to take
            # read_parquet gave this one file as one block, whatever override_num_blocks
            # asked: without the repartition one actor took every batch.
            ds = ray.data.read_parquet(str(source)).repartition(blocks).materialize()
            assert ds.num_blocks() == blocks, ds.num_blocks()
            for n in range(args.rounds):
                result = one_round(ds, models, args, n)
                print(f"round {n + 1}: {result}")
                rounds.append(result)
    finally:
        ray.shutdown()
    report = {
        "rows": args.rows,
        "cpus": args.cpus,
        "actors": args.actors,
        "batch_size": args.batch_size,
        "calls_per_actor": args.calls_per_actor,
        "machine_cpus": os.cpu_count(),
        "rounds": rounds,
        "median_no_sql_vs_plain": statistics.median(r["no_sql_vs_plain"] for r in rounds),
        "median_with_sql_vs_plain": statistics.median(r["with_sql_vs_plain"] for r in rounds),
    }
    path = args.out / "jobs_ray.json"
    path.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    print(
        f"medians: entry point without SQL / plain {report['median_no_sql_vs_plain']}, "
        f"with PostgreSQL rows / plain {report['median_with_sql_vs_plain']}; wrote {path}"
    )


if __name__ == "__main__":
    main()
