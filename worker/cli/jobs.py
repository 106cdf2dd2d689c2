"""``inferlane score`` and ``inferlane jobs list | show | cancel | export``."""

from __future__ import annotations

import time
from collections import Counter
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from worker.cli.options import Database, database_url

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sqlalchemy import Engine

    from storage.job_chunks import ChunkStates
    from storage.jobs import JobRecord
    from worker.jobs.local import Progress as JobProgress

jobs_app = typer.Typer(
    help="Offline scoring jobs: list, show, cancel, export.", no_args_is_help=True
)
console = Console(stderr=True)

Bootstrap = Annotated[
    str | None,
    typer.Option("--bootstrap", "-b", envvar="INFERLANE_BOOTSTRAP", help="Kafka bootstrap."),
]
JobName = Annotated[str, typer.Argument(help="The job's name.")]


def score(
    model: Annotated[str, typer.Option(help="Model name in the registry.")],
    input: Annotated[
        str | None,
        typer.Option(
            help="Rows: .parquet, .csv or .jsonl; with --distributed also a URI (s3://...)."
        ),
    ] = None,
    output: Annotated[
        str | None,
        typer.Option(
            help="Scored rows; the format follows the extension; with --distributed also a URI."
        ),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option(help="Replace an existing --output file that another job wrote.")
    ] = False,
    database: Database = None,
    job: Annotated[str | None, typer.Option(help="Job name (default: from the files).")] = None,
    input_column: Annotated[
        list[str] | None,
        typer.Option(
            help="Column of the inputs; repeat (or comma-separate) for one number each, or"
            " one field each of a generative model's inputs."
        ),
    ] = None,
    id_column: Annotated[str | None, typer.Option(help="Column of row ids, kept.")] = None,
    label_column: Annotated[str | None, typer.Option(help="Ground truth: drift log.")] = None,
    models: Annotated[Path | None, typer.Option(help="Registry TOML; unset: demo models.")] = None,
    window_rows: Annotated[
        int | None, typer.Option(help="Rows per checkpoint (default 32768; text 2048).")
    ] = None,
    batch_size: Annotated[
        int | None,
        typer.Option(help="Rows per forward pass (default: the batch controller's choice)."),
    ] = None,
    sql_results: Annotated[bool, typer.Option(help="Write result and drift rows.")] = True,
    distributed: Annotated[
        bool, typer.Option(help="Publish the input's chunks for the running workers to score.")
    ] = False,
    chunk_rows: Annotated[
        int | None,
        typer.Option(
            min=1, help="With --distributed: rows per chunk (default: four checkpoint windows)."
        ),
    ] = None,
    bootstrap: Bootstrap = None,
    from_topic: Annotated[
        str | None, typer.Option(help="Re-score this request topic's past requests instead.")
    ] = None,
    from_time: Annotated[
        datetime | None, typer.Option(help="With --from-topic: first publish time (UTC).")
    ] = None,
    to_time: Annotated[
        datetime | None, typer.Option(help="With --from-topic: publish time to stop at (UTC).")
    ] = None,
    torch_threads: Annotated[int | None, typer.Option(help="torch intra-op threads.")] = None,
) -> None:
    """Score a file (or a topic's past requests) with a model, resumably.

    After a crash, run the same command again: it goes on where it stopped."""
    import torch

    from worker.cli.job_checks import check_job, local_or_uri
    from worker.jobs.params import JobParams, check_name

    if torch_threads is not None:
        torch.set_num_threads(torch_threads)
    dest = local_or_uri(output, "--output", distributed)
    if dest is None and not distributed:
        raise typer.BadParameter("--output is required (unless --distributed)")
    source = local_or_uri(input, "--input", distributed)
    if from_topic is not None:
        assert isinstance(dest, Path)  # a local job's
        source, input_column, id_column, label_column = _snapshot(
            from_topic, from_time, to_time, model, dest, bootstrap
        )
    if source is None:
        raise typer.BadParameter("--input (or --from-topic) is required")
    if isinstance(dest, Path) and dest.exists() and dest.samefile(source):
        console.print(f"[red]--output {dest} is the input file: choose another path[/]")
        raise typer.Exit(2)
    params = JobParams(
        model=model,
        input=source,
        output=dest,
        input_columns=tuple(input_column or ["inputs"]),
        id_column=id_column,
        label_column=label_column,
        window_rows=window_rows,
        batch_size=batch_size,
        sql_results=sql_results or distributed,
    )
    check_job(params, models, distributed=distributed)
    name = check_name(job or params.default_name())
    if distributed:
        _publish(name, params, database_url(database), bootstrap, models, chunk_rows)
        return
    _run_local(name, params, database_url(database), models, overwrite)
    if from_topic is not None:
        _compare(name, params, database_url(database))


def _snapshot(
    topic: str,
    from_time: datetime | None,
    to_time: datetime | None,
    model: str,
    output: Path,
    bootstrap: str | None,
) -> tuple[Path, list[str], str, str]:
    """The topic range as a JSON Lines input (kept, so that a rerun resumes on it)."""
    from worker.jobs.topic import snapshot_topic

    if bootstrap is None:
        raise typer.BadParameter(
            "--bootstrap (or INFERLANE_BOOTSTRAP) is required with --from-topic"
        )
    dest = output.resolve().with_name(output.name + ".source.jsonl")
    if not dest.exists():
        snap = snapshot_topic(
            bootstrap, topic, model, _epoch_ms(from_time), _epoch_ms(to_time), dest
        )
        console.print(
            f"{snap.records:,} requests for {model} copied from {topic} to {dest} "
            f"({snap.other_models:,} for other models left out)"
        )
    return dest, ["inputs"], "request_id", "expected"


def _epoch_ms(moment: datetime | None) -> int | None:
    if moment is None:
        return None
    aware = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return int(aware.timestamp() * 1000)


def _compare(name: str, params: object, url: str) -> None:
    from storage import ResultStore
    from worker.jobs.params import JobParams
    from worker.jobs.topic import compare

    assert isinstance(params, JobParams)
    assert isinstance(params.output, Path) and isinstance(params.input, Path)  # a local job's
    dest = params.output.with_name(params.output.name + ".diff.jsonl")
    with ResultStore(url) as store:
        diff = compare(store, name, params.input, dest)
    share = diff.changed / diff.compared if diff.compared else 0.0
    Console().print(
        f"compared with stored results: {diff.compared:,} rows, {diff.changed:,} changed "
        f"({share:.2%}), {diff.missing:,} without a stored result; changes in {diff.path}"
    )


def _run_local(name: str, params: object, url: str, models: Path | None, overwrite: bool) -> None:
    from storage import ResultStore
    from worker.cli.registry import load_registry
    from worker.jobs.liveness import JobFailed
    from worker.jobs.local import JobError, LocalJob, OutputExists
    from worker.jobs.params import JobParams

    assert isinstance(params, JobParams)
    registry = load_registry(models)
    bar = Progress(
        TextColumn(f"[bold]{name}[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
    )
    started, first = time.monotonic(), [-1]

    def on_progress(p: JobProgress) -> None:
        if first[0] < 0:
            first[0] = p.done_rows
            bar.add_task("score", total=p.total_rows, completed=p.done_rows, rate="")
        elapsed = max(time.monotonic() - started, 1e-9)
        rate = f"{(p.done_rows - first[0]) / elapsed:,.0f} rows/s"
        bar.update(bar.task_ids[0], completed=p.done_rows, rate=rate)

    with ResultStore(url) as store:
        try:
            with bar:
                local = LocalJob(
                    name, params, registry, store, on_progress=on_progress, overwrite=overwrite
                )
                record = local.run()
        except OutputExists as exc:
            console.print(f"[red]{exc}[/]")
            raise typer.Exit(2) from None
        except (JobError, JobFailed) as exc:
            console.print(f"[red]{exc}[/]")
            raise typer.Exit(1) from None
    rows_this_run = (record.checkpoint - first[0]) if first[0] >= 0 else 0
    batches = local.sizer.batches if local.sizer else Counter[int]()
    _summary(record, rows_this_run, time.monotonic() - started, url, batches)


def _summary(
    record: JobRecord,
    rows_this_run: int,
    elapsed_s: float,
    url: str,
    batches: Counter[int] | None = None,
) -> None:
    from worker.jobs.outputs import errors_path

    params = record.params
    table = Table(title=f"job {record.name}: {record.state}", show_header=False)
    table.add_row("rows", f"{record.checkpoint:,} of {record.rows_total or 0:,}")
    table.add_row("errors", f"{record.errors:,}")
    if record.labelled:
        table.add_row("accuracy", f"{record.correct / record.labelled:.4f} of {record.labelled:,}")
        table.add_row("mean abs error", f"{record.abs_error_sum / record.labelled:.4f}")
    if rows_this_run:
        table.add_row(
            "throughput", f"{rows_this_run / elapsed_s:,.0f} rows/s ({rows_this_run:,} this run)"
        )
    if batches:
        common = ", ".join(f"{size} ({n:,})" for size, n in batches.most_common(3))
        table.add_row("batch sizes (forward passes)", common)
    table.add_row("recomputed after crashes", f"{record.recomputed:,} rows")
    if params.get("output"):
        table.add_row("output", str(params["output"]))
        table.add_row("errors file", str(errors_path(Path(params["output"]))))
    table.add_row("database", url)
    Console().print(table)


def _publish(
    name: str,
    params: object,
    url: str,
    bootstrap: str | None,
    models: Path | None,
    chunk_rows: int | None,
) -> None:
    from consumers.broker_check import require_broker
    from storage import ResultStore
    from storage.job_chunks import ChunkStore
    from worker.cli.registry import load_registry
    from worker.jobs.distributed import publish
    from worker.jobs.liveness import JobFailed
    from worker.jobs.local import JobError
    from worker.jobs.params import JobParams
    from worker.settings import WorkerSettings

    assert isinstance(params, JobParams)
    if bootstrap is None:
        raise typer.BadParameter(
            "--bootstrap (or INFERLANE_BOOTSTRAP) is required with --distributed"
        )
    registry = load_registry(models)
    # Before the job's row exists: a broker that is not there leaves no failed job behind.
    require_broker(bootstrap, WorkerSettings().kafka.security)
    with ResultStore(url) as store:
        try:
            record = publish(name, params, registry, store, bootstrap, chunk_rows=chunk_rows)
        except (JobError, JobFailed) as exc:
            console.print(f"[red]{exc}[/]")
            raise typer.Exit(1) from None
        states = ChunkStore(store.engine).states(name)
    console.print(
        f"job {name}: {record.state}, {states.total:,} chunks of {record.rows_total or 0:,} "
        f"rows for the workers; follow with `inferlane jobs show {name}`"
    )


@contextmanager
def _jobs_database(database: str | None) -> Iterator[Engine]:
    """The database that holds the jobs: one that does not exist (a SQLite file) or holds
    no jobs table is refused, never created."""
    from worker.cli.database import existing_database

    with existing_database(database_url(database), "jobs", default=database is None) as engine:
        yield engine


@jobs_app.command("list")
def list_jobs(database: Database = None) -> None:
    """Every job: state, progress, and why it failed or stopped."""
    from storage.jobs import JobStore

    table = Table("job", "kind", "model", "state", "rows", "errors", "updated", "note")
    with _jobs_database(database) as engine:
        for r in JobStore(engine).all():
            total = f"{r.rows_total:,}" if r.rows_total is not None else "?"
            table.add_row(
                r.name,
                r.kind,
                r.model,
                r.status,
                f"{r.checkpoint:,}/{total}",
                f"{r.errors:,}",
                r.updated_at.strftime("%Y-%m-%d %H:%M:%S"),
                _note(r),
            )
    Console().print(table)


@jobs_app.command()
def show(name: JobName, database: Database = None) -> None:
    """One job: parameters, state, counters; for a distributed job, results so far."""
    from storage.job_chunks import ChunkStore
    from storage.jobs import DONE, JobStore

    with _jobs_database(database) as engine:
        jobs = JobStore(engine)
        record = jobs.get(name)
        if record is None:
            console.print(f"[red]no job {name!r}[/]")
            raise typer.Exit(1)
        table = Table(title=f"job {name}", show_header=False)
        table.add_row("state", record.status)
        if note := _note(record):
            table.add_row("note", note)
        for key in (
            "kind",
            "model",
            "rows_total",
            "checkpoint",
            "errors",
            "labelled",
            "correct",
            "recomputed",
            "created_at",
            "updated_at",
            "runner",
            "heartbeat_at",
        ):
            table.add_row(key, str(getattr(record, key)))
        for key, value in record.params.items():
            table.add_row(f"params.{key}", str(value))
        if record.kind == "distributed":
            _chunk_rows(table, ChunkStore(engine).states(name))
            counts = jobs.result_counts(name)
            scored = sum(counts.values())
            table.add_row("results in SQL", f"{scored:,} {dict(sorted(counts.items()))}")
            table.add_row("complete", "yes" if record.state == DONE else "no")
    Console().print(table)


def _chunk_rows(table: Table, states: ChunkStates) -> None:
    """A distributed job's chunks: done, in flight (held by a live worker), waiting,
    failed, and those whose worker stopped beating (another takes them over)."""
    from storage.job_chunks import DONE, PENDING, STALLED
    from storage.jobs import FAILED, RUNNING

    n = states.counts.get
    table.add_row("chunks", f"{states.total:,}")
    table.add_row("chunks done", f"{n(DONE, 0):,}")
    table.add_row("chunks in flight", f"{n(RUNNING, 0):,}")
    table.add_row("chunks pending", f"{n(PENDING, 0):,}")
    table.add_row("chunks failed", f"{n(FAILED, 0):,}")
    if n(STALLED):
        table.add_row("chunks stalled", f"{n(STALLED, 0):,} (no heartbeat: being taken over)")
    table.add_row("chunks taken over", f"{states.taken_over:,}")
    if states.failure:
        table.add_row("first chunk failure", states.failure)


def _note(record: JobRecord) -> str:
    """Why a job failed, or that its process is gone and how to go on."""
    from storage.jobs import FAILED, INTERRUPTED

    if record.status == FAILED:
        return record.error or ""
    if record.status == INTERRUPTED:
        beat = record.heartbeat_at
        since = f" since {beat.strftime('%Y-%m-%d %H:%M:%S')}" if beat else ""
        return (
            f"no heartbeat from {record.runner or 'its process'}{since}: "
            "run the same command again to resume it"
        )
    return ""


@jobs_app.command()
def cancel(name: JobName, database: Database = None) -> None:
    """Stop a running job at its next checkpoint; it cannot be resumed."""
    from storage.jobs import JobStore

    with _jobs_database(database) as engine:
        if not JobStore(engine).cancel(name):
            console.print(f"[red]no running job {name!r}[/]")
            raise typer.Exit(1)
    console.print(f"job {name} cancelled")


@jobs_app.command()
def export(
    name: JobName,
    output: Annotated[
        str | None,
        typer.Option(
            help="Scored rows; the format follows the extension, a path or a URI "
            "(default: the job's --output)."
        ),
    ] = None,
    database: Database = None,
) -> None:
    """Write a distributed job's outputs in input order, once every chunk is done."""
    from worker.jobs.distributed import ExportError, export_job
    from worker.jobs.sources import is_uri

    with _jobs_database(database) as engine:
        try:
            dest = output if output is None or is_uri(output) else Path(output).resolve()
            written = export_job(name, engine, dest)
        except ExportError as exc:
            console.print(f"[red]{exc}[/]")
            raise typer.Exit(1) from None
    console.print(f"job {name}: {written:,} rows written")
