"""``python -m bench.drift_data --rows N --database URL [--days D] [--timings]``

Fills a store with a synthetic drift log (``N`` rows over the last ``D`` days, three
models, about 2% of rows off by more than 0.5) and the matching 60 s drift windows,
then, with ``--timings``, times the contract query, ``inferlane anomalies --since 1h``
and ``inferlane drift`` over the last day, and prints the PostgreSQL/SQLite plans.
PostgreSQL rows come from ``generate_series`` in the server (fast); SQLite's from
``executemany`` in chunks.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import numpy as np
from sqlalchemy import Engine, text

from storage import make_engine, upgrade
from storage.anomalies import find_anomalies
from storage.drift_records import INPUT, OUTPUT, WindowDelta, WindowKey, window_start
from storage.drift_windows import add_windows

MODELS = ("digits", "diabetes", "minilm")
WINDOW_S = 60
CONTRACT = "SELECT COUNT(*) FROM inference_log WHERE ABS(output - expected) > 0.5"

_PG_FILL = """
INSERT INTO inference_log (request_id, model, model_version, output, expected, error, created_at)
SELECT 'g' || g, (ARRAY['digits','diabetes','minilm'])[1 + g % 3], '1', o, e, o - e,
       now() - make_interval(secs => :span_s * random())
FROM (
  SELECT g, floor(random() * 10) AS e,
         CASE WHEN random() < 0.02 THEN floor(random() * 10) ELSE NULL END AS wrong
  FROM generate_series(1, :rows) AS g
) s, LATERAL (SELECT COALESCE(wrong, e) AS o) x
"""


def fill_log(engine: Engine, rows: int, days: float) -> None:
    span_s = days * 86400
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text(_PG_FILL), {"rows": rows, "span_s": span_s})
            return
        rng = np.random.default_rng(0)
        now = datetime.now(UTC)
        sql = text(
            "INSERT INTO inference_log (request_id, model, model_version, output, expected, "
            "error, created_at) VALUES (:r, :m, '1', :o, :e, :err, :at)"
        )
        for start in range(0, rows, 100_000):
            n = min(100_000, rows - start)
            e = rng.integers(0, 10, n).astype(float)
            o = np.where(rng.random(n) < 0.02, rng.integers(0, 10, n), e)
            ago = rng.random(n) * span_s
            conn.execute(
                sql,
                [
                    {
                        "r": f"g{start + i}",
                        "m": MODELS[(start + i) % 3],
                        "o": float(o[i]),
                        "e": float(e[i]),
                        "err": float(o[i] - e[i]),
                        "at": now - timedelta(seconds=float(ago[i])),
                    }
                    for i in range(n)
                ],
            )


def fill_windows(engine: Engine, rows: int, days: float) -> None:
    """The 60 s windows those rows would have produced (counts, bins)."""
    rng = np.random.default_rng(1)
    now = datetime.now(UTC)
    windows = int(days * 86400 / WINDOW_S)
    per = max(1, rows // (windows * len(MODELS)))
    deltas: dict[WindowKey, WindowDelta] = {}
    for w in range(windows):
        start = window_start(now - timedelta(seconds=w * WINDOW_S), WINDOW_S)
        for m in MODELS:
            d = WindowDelta(rows=per, labelled=per, wrong=int(per * 0.02), abs_error_sum=per * 0.1)
            d.add_bins(OUTPUT, [int(c) for c in rng.multinomial(per, [0.1] * 10)])
            d.add_bins(INPUT, [int(c) for c in rng.multinomial(per, [0.1] * 10)])
            deltas[WindowKey(m, "1", start)] = d
        if len(deltas) >= 3000:
            add_windows(engine, deltas, WINDOW_S)
            deltas = {}
    add_windows(engine, deltas, WINDOW_S)


def timings(url: str) -> None:
    engine = make_engine(url)
    with engine.connect() as conn:
        explain = "EXPLAIN " if engine.dialect.name == "postgresql" else "EXPLAIN QUERY PLAN "
        for label, sql in (
            ("contract", CONTRACT),
            ("since 1h", CONTRACT + " AND created_at >= :since"),
        ):
            params = {"since": datetime.now(UTC) - timedelta(hours=1)}
            plan = conn.execute(text(explain + sql), params).all()
            print(f"-- plan ({label}):")
            for row in plan:
                print("  ", " ".join(str(c) for c in row))
            started = time.perf_counter()
            count = conn.execute(text(sql), params).scalar_one()
            print(f"{label}: {count} rows in {time.perf_counter() - started:.3f}s")
    _in_process(engine)
    engine.dispose()
    for args in (["anomalies", "--since", "1h", "--json"], ["drift", "--since", "1d", "--json"]):
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "worker", *args, "--database", url],
            check=True,
            capture_output=True,
        )
        print(f"inferlane {' '.join(args)}: {time.perf_counter() - started:.2f}s (process)")


def _in_process(engine: Engine) -> None:
    """The CLI's own queries, without the process start (Python and torch imports)."""
    from worker.drift.views import Window, verdicts
    from worker.settings.drift_thresholds import DriftThresholds

    now = datetime.now(UTC)
    started = time.perf_counter()
    found = find_anomalies(engine, since=now - timedelta(hours=1), limit=20)
    print(f"anomalies --since 1h: {found.count} in {time.perf_counter() - started:.3f}s")
    started = time.perf_counter()
    judged = verdicts(
        engine,
        model=None,
        since=now - timedelta(days=1),
        window=Window(),
        default=DriftThresholds(),
        per_model={},
    )
    print(f"drift --since 1d: {len(judged)} windows in {time.perf_counter() - started:.3f}s")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.drift_data", description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--database", required=True)
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--timings", action="store_true")
    args = parser.parse_args()
    engine = make_engine(args.database)
    upgrade(engine)
    started = time.perf_counter()
    fill_log(engine, args.rows, args.days)
    fill_windows(engine, args.rows, args.days)
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE inference_log"))
    else:
        with engine.begin() as conn:
            conn.execute(text("ANALYZE"))
    engine.dispose()
    print(f"filled {args.rows} rows in {time.perf_counter() - started:.1f}s")
    if args.timings:
        timings(args.database)


if __name__ == "__main__":
    main()
