"""``python -m bench.sql_rows``: how fast ``ResultStore.write_columns`` stores a job's rows.

The rows are a local job's own: digits over ``--rows`` input rows, scored through the
job path (``worker.jobs.rows.window_result``), one ``ok`` result row (outputs as the
pre-serialized JSON a Kafka request gets) and one drift row per input row. They are
built once, as columns (as a job builds them); then each database gets them written in
transactions of ``--window`` rows (repeat it: ``--window 4096,32768``; 32,768 is a
numeric job's checkpoint window, 4,096 the Ray Data bench's batch), timed per write,
into a fresh SQLite file and a fresh PostgreSQL database: first as new rows, then the
same rows again (every row a conflict: what a resumed window or a Ray batch run twice
writes). Each pass is checked afterwards: one result and one drift row per id. The
figure is input rows per second of ``write_columns`` alone (binding, driver, database),
the median of ``--rounds`` rounds; beside it, the CPU time per input row of this process
(building the statements' data) and, on a PostgreSQL server on this machine, of the
connection's backend process (storing it):
those two move less than the rate when other work shares the machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq

from bench.jobs import digits_parquet
from bench.jobs_scaleout import pg_database, stored_rows
from storage import ResultStore, RowColumns, Same
from worker.cli.registry import load_registry
from worker.demo.models import ensure_demo_models
from worker.execution.aside import submit_rows
from worker.execution.executor import ThreadExecutor
from worker.jobs.batch_size import BatchSizer
from worker.jobs.decode import Columns, decode
from worker.jobs.rows import window_result
from worker.jobs.sources import Window


def job_rows(rows: int) -> tuple[RowColumns, RowColumns]:
    """A digits job's result and drift rows for ``rows`` input rows, one window."""
    registry = load_registry(ensure_demo_models())
    model = registry.get("digits")
    with tempfile.TemporaryDirectory(prefix="bench-sql-") as tmp:
        table = pq.read_table(digits_parquet(Path(tmp) / "digits.parquet", rows))
    window = Window(0, table)
    decoded = decode(window, model.adapter, Columns(("inputs",), "id", "label"))
    sizer = BatchSizer(registry.spec("digits").scheduling, model.max_batch)
    executor = ThreadExecutor(registry.get)
    forward = partial(submit_rows, executor.submit, "digits")
    result = window_result("bench", window, decoded, model, sizer, forward)
    executor.shutdown()
    assert result.results.length == result.drift.length == rows
    return result.results, result.drift


@contextmanager
def database(kind: str) -> Iterator[str]:
    if kind == "postgresql":
        with pg_database() as url:
            yield url
        return
    with tempfile.TemporaryDirectory(prefix="bench-sql-") as tmp:
        yield f"sqlite:///{Path(tmp) / 'rows.db'}"


def _part(rows: RowColumns, start: int, end: int) -> RowColumns:
    columns = {k: v if isinstance(v, Same) else v[start:end] for k, v in rows.columns.items()}
    return RowColumns(min(end, rows.length) - start, columns)


def _written(
    store: ResultStore, results: RowColumns, drift: RowColumns, n: int
) -> dict[str, float | None]:
    """Rows per second of writing ``results`` and ``drift`` in transactions of ``n`` rows,
    and CPU microseconds per row here and in PostgreSQL's backend."""
    backend = _backend_pid(store)
    spent = client = server = 0.0
    for start in range(0, results.length, n):
        part, part_drift = _part(results, start, start + n), _part(drift, start, start + n)
        started, cpu, served = time.perf_counter(), time.process_time(), _cpu_s(backend)
        store.write_columns(part, part_drift)
        spent += time.perf_counter() - started
        client += time.process_time() - cpu
        server += _cpu_s(backend) - served
    return {
        "rows_per_s": round(results.length / spent),
        "client_us_per_row": round(client * 1e6 / results.length, 1),
        "server_us_per_row": round(server * 1e6 / results.length, 1) if backend else None,
    }


def _backend_pid(store: ResultStore) -> int | None:
    """The pid of the PostgreSQL backend that the store's (one, reused) connection has, if
    it runs on this machine."""
    if store.engine.dialect.name != "postgresql":
        return None
    with store.engine.connect() as conn:
        pid = int(conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())
    return pid if os.path.exists(f"/proc/{pid}/stat") else None


def _cpu_s(pid: int | None) -> float:
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def one_pass(kind: str, window: int, rows: tuple[RowColumns, RowColumns]) -> dict[str, Any]:
    results, drift = rows
    with database(kind) as url:
        with ResultStore(url) as store:  # migrated here, before the timing
            new = _written(store, results, drift, window)
            again = _written(store, results, drift, window)
        stored = stored_rows(url)
    if stored != (results.length,) * 3:
        raise AssertionError(f"{kind}: stored (rows, ids, drift) {stored}, not {results.length}")
    return {
        **{f"new_{what}": value for what, value in new.items()},
        **{f"rewritten_{what}": value for what, value in again.items()},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.sql_rows", description=__doc__)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--window", default="4096,32768", help="rows per write, comma-separated")
    parser.add_argument("--databases", default="sqlite,postgresql")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("bench/out"))
    args = parser.parse_args(argv)
    windows = [int(w) for w in args.window.split(",")]
    kinds = args.databases.split(",")
    rows = job_rows(args.rows)
    runs: dict[str, list[dict[str, Any]]] = {}
    for n in range(args.rounds):
        for kind in kinds:  # interleaved, so that each round sees the machine alike
            for window in windows:
                result = one_pass(kind, window, rows)
                runs.setdefault(f"{kind} {window}", []).append(result)
                print(f"round {n + 1}: {kind}, {window} rows per write: {result}", flush=True)
    summary = {
        key: {
            what: {
                "median": statistics.median(r[what] for r in results),
                "range": [min(r[what] for r in results), max(r[what] for r in results)],
            }
            for what in results[0]
            if results[0][what] is not None
        }
        for key, results in runs.items()
    }
    for key, figures in summary.items():
        print(f"{key}: " + ", ".join(f"{w} {f['median']} {f['range']}" for w, f in figures.items()))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "sql_rows.json"
    report = {"rows": args.rows, "rounds": runs, "summary": summary}
    path.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
