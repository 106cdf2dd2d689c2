"""``python -m bench.jobs``: offline jobs against their targets, in one run.

- digits over a Parquet file (1,000,000 rows): Parquet → Parquet, then with the SQLite
  result and drift rows written too;
- minilm over a Parquet file of 20,000 sentences against the ceiling at its best batch
  size, measured between the job's windows (``bench.jobs_minilm``), ``--rounds`` times;
- ``kill -9`` of ``inferlane score`` at about half of a 200,000-row job, then the same
  command again: every row exactly once, and the rows scored twice counted;
- a distributed job of 1,000,000 digits rows in chunks, one and two ``inferlane run``
  workers, beside the local job, all into PostgreSQL (``bench.jobs_scaleout``).

Jobs run in this process, with the model loaded and warmed first, so that the figures
are the scoring itself; the kill test runs the CLI as users do.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from sqlalchemy import text

from bench import jobs_minilm, jobs_scaleout
from storage import ResultStore, make_engine
from storage.jobs import JobStore
from worker.cli.registry import load_registry
from worker.demo.models import digits_test_set
from worker.jobs.local import LocalJob
from worker.jobs.outputs import parts_dir
from worker.jobs.params import NUMERIC_WINDOW_ROWS, JobParams
from worker.models import ModelRegistry


def digits_parquet(path: Path, n: int) -> Path:
    x, y = digits_test_set()
    idx = np.arange(n) % len(x)
    table = pa.table(
        {
            "id": pa.array(np.arange(n)),
            "inputs": pa.FixedSizeListArray.from_arrays(pa.array(x[idx].ravel()), 64),
            "label": pa.array(y[idx].astype(np.int64)),
        }
    )
    pq.write_table(table, path, row_group_size=131_072)
    return path


def timed_job(
    registry: ModelRegistry, work: Path, name: str, **params: Any
) -> tuple[float, dict[str, Any]]:
    """Rows per second of one job, from an empty database, model already loaded."""
    url = f"sqlite:///{work / (name + '.db')}"
    job_params = JobParams(output=work / f"{name}.parquet", **params)
    with ResultStore(url) as store:
        job = LocalJob(name, job_params, registry, store)
        started = time.perf_counter()
        record = job.run()
        elapsed = time.perf_counter() - started
    batches = job.sizer.batches if job.sizer else Counter[int]()
    return record.checkpoint / elapsed, {
        "rows": record.checkpoint,
        "errors": record.errors,
        "seconds": round(elapsed, 2),
        "accuracy": record.correct / record.labelled if record.labelled else None,
        # forward passes per batch size, most used first
        "batch_sizes": {str(size): n for size, n in batches.most_common()},
    }


def digits_runs(registry: ModelRegistry, work: Path, rows: int, say: Any) -> dict[str, Any]:
    source = digits_parquet(work / "digits.parquet", rows)
    registry.warmup("digits", 256)
    common = {"model": "digits", "input": source, "id_column": "id", "label_column": "label"}
    out: dict[str, Any] = {}
    for label, sql in (("parquet_to_parquet", False), ("with_sqlite_rows", True)):
        rps, info = timed_job(registry, work, f"digits-{label}", sql_results=sql, **common)
        out[label] = {"rows_per_s": round(rps), **info}
        say(f"digits {rows:,} rows {label}: {rps:,.0f} rows/s ({info['seconds']} s)")
    return out


def _scoring(output: Path, checkpoint: int) -> bool:
    """A window past the checkpoint is being scored (its in-flight marker is there)."""
    try:
        return any(
            p.suffix == ".inflight" and int(p.name.split("-")[0]) >= checkpoint
            for p in parts_dir(output).iterdir()
        )
    except FileNotFoundError:  # not started yet, or finished
        return False


def kill_and_resume(work: Path, rows: int, say: Any) -> dict[str, Any]:
    source = digits_parquet(work / "kill.parquet", rows)
    output, url = work / "kill-out.parquet", f"sqlite:///{work / 'kill.db'}"
    command = [
        sys.executable, "-m", "worker", "score", "--model", "digits", "--input", str(source),
        "--output", str(output), "--database", url, "--job", "kill", "--id-column", "id",
        "--label-column", "label",
    ]  # fmt: skip
    engine = make_engine(url)
    jobs = JobStore(engine)
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    at_kill = 0
    # Past half, and while the next window is being scored.
    while proc.poll() is None and not (at_kill >= rows // 2 and _scoring(output, at_kill)):
        try:
            job = jobs.get("kill")
        except Exception:  # the job table is not there yet
            job = None
        at_kill = job.checkpoint if job else 0
        time.sleep(0.005)
    proc.kill()
    proc.wait()
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    resume_s = time.perf_counter() - started
    done = jobs.get("kill")
    assert done is not None
    with engine.connect() as conn:
        total, distinct = conn.execute(
            text("SELECT COUNT(*), COUNT(DISTINCT request_id) FROM inference_results")
        ).one()
    engine.dispose()
    order = pq.read_table(output, columns=["row"]).column("row").to_numpy()
    result = {
        "rows": rows,
        "checkpoint_at_kill": at_kill,
        "recomputed_rows": done.recomputed,
        "window_rows": NUMERIC_WINDOW_ROWS,
        "sql_results": total,
        "sql_distinct_ids": distinct,
        "output_rows": len(order),
        "output_in_order_exactly_once": bool(np.array_equal(order, np.arange(rows))),
        "resume_s_including_startup": round(resume_s, 1),
    }
    say(
        f"kill -9 at row {at_kill:,} of {rows:,}: resumed, {done.recomputed:,} rows recomputed; "
        f"SQL {total:,} rows ({distinct:,} ids), output {len(order):,} rows in order: "
        f"{result['output_in_order_exactly_once']}"
    )
    return result


def scaleout(
    registry: ModelRegistry, work: Path, rows: int, rounds: int, say: Any
) -> dict[str, Any]:
    """The local job and the distributed one (1 and 2 workers), PostgreSQL, same rows,
    in turn, ``rounds`` times: the machine's load moves between runs a minute apart."""
    source = digits_parquet(work / "scaleout.parquet", rows)
    warmup = digits_parquet(work / "warmup.parquet", 2000)
    runs: list[dict[str, Any]] = []
    for n in range(rounds):
        local = jobs_scaleout.local_run(registry, source, work)
        say(f"round {n + 1}: local job, {rows:,} digits rows: {local['rows_per_s']:,} rows/s")
        one, two = (
            jobs_scaleout.distributed_run(registry, source, warmup, w, work, torch_threads=1)
            for w in (1, 2)
        )
        for run in (one, two):
            say(
                f"round {n + 1}: distributed, {run['workers']} worker(s): "
                f"{run['rows_per_s']:,} rows/s ({run['seconds']} s, of which publishing "
                f"{run['publish_seconds']} s); each row once in PostgreSQL: "
                f"{run['each_row_once']}; machine busy {run['cpu']['machine_busy_share']:.0%}"
            )
        ratios = {
            "one_vs_local": round(one["rows_per_s"] / local["rows_per_s"], 3),
            "two_vs_one": round(two["rows_per_s"] / one["rows_per_s"], 3),
        }
        say(f"round {n + 1}: {ratios}")
        runs.append({"local": local, "one_worker": one, "two_workers": two, **ratios})
    return {
        "rounds": runs,
        "median_one_vs_local": statistics.median(r["one_vs_local"] for r in runs),
        "median_two_vs_one": statistics.median(r["two_vs_one"] for r in runs),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.jobs", description=__doc__)
    parser.add_argument("--digits-rows", type=int, default=1_000_000)
    parser.add_argument("--minilm-rows", type=int, default=20_000)
    parser.add_argument("--kill-rows", type=int, default=200_000)
    parser.add_argument("--scaleout-rows", type=int, default=1_000_000)
    parser.add_argument("--scaleout-rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="a tenth of each size")
    parser.add_argument("--rounds", type=int, default=3, help="minilm: jobs, between ceilings")
    parser.add_argument(
        "--minilm-batch-size", type=int, default=None, help="pin the minilm job's batch size"
    )
    parser.add_argument("--only", default="digits,minilm,kill,scaleout")
    parser.add_argument("--torch-threads", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--out", type=Path, default=Path("bench/out"))
    args = parser.parse_args(argv)
    scale = 10 if args.quick else 1
    torch.set_num_threads(args.torch_threads)
    args.out.mkdir(parents=True, exist_ok=True)
    registry = load_registry(None)
    only = set(args.only.split(","))
    report: dict[str, Any] = {"torch_threads": args.torch_threads, "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="bench-jobs-") as tmp:
        work = Path(tmp)
        if "digits" in only:
            report["digits"] = digits_runs(registry, work, args.digits_rows // scale, print)
        if "minilm" in only:
            rows = args.minilm_rows // scale
            report["minilm"] = jobs_minilm.runs(
                registry, work, rows, args.rounds, print, args.minilm_batch_size
            )
        if "kill" in only:
            report["kill"] = kill_and_resume(work, args.kill_rows // scale, print)
        if "scaleout" in only:
            rows = args.scaleout_rows // scale
            report["scaleout"] = scaleout(registry, work, rows, args.scaleout_rounds, print)
    path = args.out / "jobs.json"
    path.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
