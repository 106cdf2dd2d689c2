"""``inferlane anomalies | drift | report``: read-only commands over the drift tables.

Every query goes through SQLAlchemy with bound parameters; nothing is pasted into SQL.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.table import Table
from sqlalchemy import Engine

from storage.anomalies import find_anomalies
from worker.cli.database import reading_engine
from worker.cli.options import Database, database_url

console = Console()


def _since(text: str | None) -> datetime | None:
    from worker.drift.views import parse_since

    if text is None:
        return None
    try:
        return parse_since(text, datetime.now(UTC))
    except ValueError:
        raise typer.BadParameter(
            f"{text!r} is neither a span back (90s, 30m, 2h, 1d) nor an ISO time "
            "(2026-12-06, 2026-12-06T10:00 or with a zone, +01:00; UTC when it has none)"
        ) from None


Model = Annotated[str | None, typer.Option(help="Only this model.")]
Json = Annotated[bool, typer.Option("--json", help="Print JSON (docs/DRIFT.md).")]
Since = Annotated[
    datetime | None,
    typer.Option(parser=_since, metavar="SPAN|TIME", help="A span back (1d, 2h) or an ISO time."),
]
Models = Annotated[
    Path | None,
    typer.Option(envvar="INFERLANE_MODELS", help="Registry TOML: per-model drift thresholds."),
]


def _print_json(value: Any) -> None:
    typer.echo(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode())


def anomalies(
    database: Database = None,
    model: Model = None,
    threshold: Annotated[float, typer.Option(help="|output - expected| above this.")] = 0.5,
    since: Since = None,
    limit: Annotated[int, typer.Option(min=0, help="Worst rows to list.")] = 20,
    json: Json = False,
) -> None:
    """Drift-log rows off by more than the threshold: the count and the worst rows."""
    engine = _reading(database, "inference_log")
    try:
        found = find_anomalies(engine, threshold=threshold, model=model, since=since, limit=limit)
    finally:
        engine.dispose()
    rows = [
        {
            "request_id": r.request_id,
            "model": r.model,
            "model_version": r.model_version,
            "output": r.output,
            "expected": r.expected,
            "abs_error": r.abs_error,
            "created_at": r.created_at.isoformat(),
        }
        for r in found.worst
    ]
    if json:
        _print_json({"threshold": threshold, "count": found.count, "worst": rows})
        return
    console.print(f"[bold]{found.count}[/] rows with |output - expected| > {threshold}")
    table = Table()
    for col in ("request_id", "model", "version", "output", "expected", "|error|", "at"):
        table.add_column(col)
    for r in found.worst:
        table.add_row(
            r.request_id, r.model, r.model_version or "", f"{r.output:g}", f"{r.expected:g}",
            f"{r.abs_error:.3g}", r.created_at.isoformat(timespec="seconds"),
        )  # fmt: skip
    console.print(table)


def drift(
    database: Database = None,
    model: Model = None,
    window: Annotated[
        str | None, typer.Option(help="Join stored windows: a span (5m, 1h) or a row count.")
    ] = None,
    since: Annotated[
        datetime | None,
        typer.Option(
            parser=_since,
            metavar="SPAN|TIME",
            help="A span back (1d, 2h) or an ISO time; unset: 1d.",
        ),
    ] = None,
    models: Models = None,
    json: Json = False,
) -> None:
    """Windows per model version: labelled error, PSI/JS/KS against the reference, flags."""
    # Imported here: the registry pulls in torch, which ``inferlane --help`` need not load.
    from worker.drift.views import Window, thresholds_for, verdict_json, verdicts

    try:
        size = Window.parse(window)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    default, per_model = thresholds_for(models)
    engine = _reading(database, "drift_windows")
    try:
        since = since or _since("1d")
        found = verdicts(
            engine, model=model, since=since, window=size, default=default, per_model=per_model
        )
    finally:
        engine.dispose()
    if json:
        _print_json({"windows": [verdict_json(v) for v in found]})
        return
    table = Table(title="drift windows (flagged in red)")
    for col in ("model", "version", "start", "rows", "error", "out PSI", "out JS/KS", "in PSI"):
        table.add_column(col, justify="right")
    for v in found:
        m, w = v.metrics, v.window
        other = m.get("output_js", m.get("output_ks"))
        error = w.error_rate if m.get("output_js") is not None else w.mean_abs_error
        table.add_row(
            w.model, w.model_version, w.start.isoformat(timespec="seconds"), str(w.rows),
            _num(error), _num(m.get("output_psi")), _num(other), _num(m.get("input_psi")),
            style="red" if v.flagged else None,
        )  # fmt: skip
    console.print(table)


def report(
    out: Annotated[Path, typer.Option(help="PNG to write.")],
    database: Database = None,
    model: Model = None,
    since: Since = None,
    models: Models = None,
) -> None:
    """One picture per model: error and drift over time, output vs reference; a summary."""
    from worker.drift.report import write_report
    from worker.drift.views import thresholds_for

    default, per_model = thresholds_for(models)
    engine = _reading(database, "drift_windows")
    try:
        lines = write_report(
            engine, out, model=model, since=since, default=default, per_model=per_model
        )
    finally:
        engine.dispose()
    for line in lines:
        console.print(line)
    console.print(f"report written to [bold]{out}[/]")


def purge(
    older_than: Annotated[str, typer.Option(help="Age to keep: 30d, 12h.")],
    database: Database = None,
    batch_rows: Annotated[int, typer.Option(min=1, help="Rows per transaction.")] = 1000,
    json: Json = False,
) -> None:
    """Delete drift-log rows and drift windows older than --older-than.

    In small transactions, which the worker's writes interleave with."""
    from storage.retention import purge as purge_rows
    from worker.drift.views import parse_span_s

    span_s = parse_span_s(older_than)
    if span_s is None:
        raise typer.BadParameter(f"--older-than takes a span (12h, 30d): {older_than!r}")
    engine = _reading(database, "inference_log")
    try:
        cutoff = datetime.now(UTC) - timedelta(seconds=span_s)
        purged = purge_rows(engine, cutoff, batch_rows=batch_rows)
    finally:
        engine.dispose()
    if json:
        _print_json({"older_than": cutoff.isoformat(), "deleted": purged.rows})
        return
    console.print(f"deleted {purged.total} rows older than {cutoff.isoformat()}: {purged.rows}")


def _reading(database: str | None, table: str) -> Engine:
    """The database to read: never created here, and refused without ``table``."""
    return reading_engine(database_url(database), table, default=database is None)


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def register(app: typer.Typer) -> None:
    for command in (anomalies, drift, report, purge):
        app.command()(command)
