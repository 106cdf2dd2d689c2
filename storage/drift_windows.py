"""SQL for the drift windows: additive upserts of window counts, references, flags, reads.

Window rows are sums, so every worker adds its own counts to the same row and the
readers see the whole group's traffic.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, Table, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.dml import Insert

from storage.drift_records import Reference, WindowDelta, WindowKey, WindowStats, as_utc
from storage.engine import begin_write
from storage.errors import classified_errors
from storage.schema import drift_bins, drift_flags, drift_references, drift_windows


def dialect_insert(table: Table, dialect: str) -> Any:
    if dialect == "sqlite":
        return sqlite.insert(table)
    if dialect == "postgresql":
        return postgresql.insert(table)
    raise ValueError(f"unsupported database dialect: {dialect}")


def _adding(
    table: Table, dialect: str, summed: tuple[str, ...], replaced: tuple[str, ...]
) -> Insert:
    """INSERT ... ON CONFLICT (primary key) DO UPDATE SET col = col + excluded.col."""
    stmt = dialect_insert(table, dialect)
    set_: dict[str, Any] = {c: table.c[c] + stmt.excluded[c] for c in summed}
    set_.update({c: stmt.excluded[c] for c in replaced})
    return stmt.on_conflict_do_update(index_elements=[c.name for c in table.primary_key], set_=set_)


def add_windows(engine: Engine, deltas: Mapping[WindowKey, WindowDelta], window_s: int) -> None:
    """Add the counts of each window, all in one transaction."""
    if not deltas:
        return
    with classified_errors(), begin_write(engine) as conn:
        add_windows_in(conn, deltas, window_s)


def add_windows_in(
    conn: Connection, deltas: Mapping[WindowKey, WindowDelta], window_s: int
) -> None:
    """``add_windows`` inside the caller's transaction."""
    if not deltas:
        return
    dialect = conn.dialect.name
    now = datetime.now(UTC)
    windows, bins = [], []
    for key, d in deltas.items():
        base: dict[str, Any] = {
            "model": key.model,
            "model_version": key.model_version,
            "window_start": key.window_start,
        }
        windows.append(
            {
                **base,
                "window_s": window_s,
                "rows": d.rows,
                "labelled": d.labelled,
                "wrong": d.wrong,
                "abs_error_sum": d.abs_error_sum,
                "ref_checked": d.ref_checked,
                "ref_deviant": d.ref_deviant,
                "updated_at": now,
            }
        )
        bins += [{**base, "series": s, "bin": b, "count": n} for (s, b), n in d.bins.items()]
    summed = ("rows", "labelled", "wrong", "abs_error_sum", "ref_checked", "ref_deviant")
    conn.execute(_adding(drift_windows, dialect, summed, ("updated_at",)), windows)
    if bins:
        conn.execute(_adding(drift_bins, dialect, ("count",), ()), bins)


def load_references(engine: Engine) -> dict[tuple[str, str, str], Reference]:
    """Every stored reference, keyed by (model, model_version, series)."""
    t = drift_references
    query = select(t.c.model, t.c.model_version, t.c.series, t.c.kind, t.c.lower, t.c["count"])
    parts: dict[tuple[str, str, str], tuple[str, list[int], list[float | None]]] = {}
    with classified_errors(), engine.connect() as conn:
        for model, version, series, kind, lower, count in conn.execute(query.order_by(t.c.bin)):
            _, counts, lowers = parts.setdefault((model, version, series), (kind, [], []))
            counts.append(int(count))
            lowers.append(lower)
    return {
        key: Reference(*key, kind, tuple(counts), tuple(lowers))
        for key, (kind, counts, lowers) in parts.items()
    }


def save_reference(engine: Engine, ref: Reference) -> None:
    """Store ``ref`` unless that model version's series has one already (first wins)."""
    now = datetime.now(UTC)
    rows = [
        {
            "model": ref.model,
            "model_version": ref.model_version,
            "series": ref.series,
            "bin": i,
            "kind": ref.kind,
            "lower": lower,
            "count": count,
            "created_at": now,
        }
        for i, (count, lower) in enumerate(zip(ref.counts, ref.lowers, strict=True))
    ]
    stmt = dialect_insert(drift_references, engine.dialect.name).on_conflict_do_nothing()
    with classified_errors(), begin_write(engine) as conn:
        if _has_reference(conn, ref):
            return
        conn.execute(stmt, rows)


def _has_reference(conn: Connection, ref: Reference) -> bool:
    t = drift_references
    query = select(t.c.bin).where(
        t.c.model == ref.model, t.c.model_version == ref.model_version, t.c.series == ref.series
    )
    return conn.execute(query.limit(1)).first() is not None


def record_flag(
    engine: Engine, key: WindowKey, metric: str, value: float, threshold: float
) -> bool:
    """Store a flag; True when it is new (so the caller counts and logs it once)."""
    stmt = dialect_insert(drift_flags, engine.dialect.name).on_conflict_do_nothing()
    row = {
        "model": key.model,
        "model_version": key.model_version,
        "window_start": key.window_start,
        "metric": metric,
        "value": value,
        "threshold": threshold,
        "flagged_at": datetime.now(UTC),
    }
    with classified_errors(), begin_write(engine) as conn:
        # RETURNING, not rowcount: psycopg reports -1 for an upsert that skipped nothing.
        return conn.execute(stmt.returning(drift_flags.c.metric), row).first() is not None


def read_windows(
    engine: Engine, *, model: str | None = None, since: datetime | None = None
) -> list[WindowStats]:
    """Stored windows (oldest first per model version), with their histograms."""
    w, b = drift_windows, drift_bins
    wq = select(
        w.c.model,
        w.c.model_version,
        w.c.window_start,
        w.c.window_s,
        w.c.rows,
        w.c.labelled,
        w.c.wrong,
        w.c.abs_error_sum,
        w.c.ref_checked,
        w.c.ref_deviant,
    )
    bq = select(b.c.model, b.c.model_version, b.c.window_start, b.c.series, b.c.bin, b.c["count"])
    if model is not None:
        wq, bq = wq.where(w.c.model == model), bq.where(b.c.model == model)
    if since is not None:
        wq, bq = wq.where(w.c.window_start >= since), bq.where(b.c.window_start >= since)
    # Keyed by the driver's own timestamp values: bins match them without conversion.
    stats: dict[tuple[str, str, Any], WindowStats] = {}
    with classified_errors(), engine.connect() as conn:
        windows = conn.execute(wq).all()
        for m, v, start, span, rows, labelled, wrong, abs_sum, checked, deviant in windows:
            stats[(m, v, start)] = WindowStats(
                m, v, as_utc(start), span, rows, labelled, wrong, abs_sum, {}, checked, deviant
            )
        for m, v, start, series, bin_, count in conn.execute(bq).all():
            window = stats.get((m, v, start))
            if window is not None:
                window.bins.setdefault(series, {})[bin_] = count
    return sorted(stats.values(), key=lambda w: (w.model, w.model_version, w.start))


def read_flags(
    engine: Engine, *, model: str | None = None, since: datetime | None = None
) -> list[tuple[WindowKey, str, float, float]]:
    """Stored flags: (window, metric, value, threshold), oldest window first."""
    f = drift_flags
    query = select(
        f.c.model, f.c.model_version, f.c.window_start, f.c.metric, f.c.value, f.c.threshold
    )
    if model is not None:
        query = query.where(f.c.model == model)
    if since is not None:
        query = query.where(f.c.window_start >= since)
    with classified_errors(), engine.connect() as conn:
        rows = conn.execute(query.order_by(f.c.window_start, f.c.model, f.c.metric)).all()
    return [(WindowKey(m, v, as_utc(s)), metric, val, thr) for m, v, s, metric, val, thr in rows]
