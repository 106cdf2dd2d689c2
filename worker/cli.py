"""The ``inferlane`` command line: run, broker, publish, demo; models, jobs, rollouts."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console

from worker.broker import EmbeddedBroker
from worker.cli_options import Database
from worker.config import WorkerSettings
from worker.drift.cli import register as register_drift_commands
from worker.jobs.cli import jobs_app, score
from worker.models.cli import app as models_app
from worker.ops.cli import HttpHost, HttpPort, LogFormatOption, MetricsPort, publish_demo
from worker.rollout.cli import rollout_app

app = typer.Typer(help="Kafka-driven inference worker.", no_args_is_help=True)
app.add_typer(models_app, name="models")
app.command()(score)
app.add_typer(jobs_app, name="jobs")
app.add_typer(rollout_app, name="rollout")
console = Console()

Bootstrap = Annotated[
    str | None,
    typer.Option(
        "--bootstrap",
        "-b",
        envvar="INFERLANE_BOOTSTRAP",
        help="Kafka bootstrap servers; unset: start the embedded broker.",
    ),
]


def _settings(**flags: Any) -> WorkerSettings:
    """Env and defaults, overridden by the flags that were given."""
    given = {k: v for k, v in flags.items() if v is not None}
    nested: dict[str, dict[str, Any]] = {}
    for key in ("max_batch", "max_wait_ms"):
        if key in given:
            nested.setdefault("batching", {})[key] = given.pop(key)
    if given.pop("single_lane", False):
        nested.setdefault("lanes", {})["single_lane"] = True
    if "group_id" in given:
        nested.setdefault("kafka", {})["group_id"] = given.pop("group_id")
    if "partitions" in given:
        nested.setdefault("topics", {})["partitions"] = given.pop("partitions")
    for key in ("http_port", "http_host"):
        if key in given:
            nested.setdefault("ops", {})[key] = given.pop(key)
    base = WorkerSettings(**given)
    updates = {
        name: getattr(base, name).model_copy(update=values) for name, values in nested.items()
    }
    return base.model_copy(update=updates)


@app.command()
def run(
    bootstrap: Bootstrap = None,
    database: Database = None,
    models: Annotated[
        Path | None, typer.Option(help="Model registry TOML; unset: demo models.")
    ] = None,
    group_id: Annotated[str | None, typer.Option(help="Kafka consumer group.")] = None,
    max_batch: Annotated[int | None, typer.Option(help="Largest batch.")] = None,
    max_wait_ms: Annotated[float | None, typer.Option(help="Longest wait to fill a batch.")] = None,
    partitions: Annotated[int | None, typer.Option(help="Partitions of topics we create.")] = None,
    single_lane: Annotated[bool, typer.Option(help="One FIFO lane (a baseline).")] = False,
    torch_threads: Annotated[int | None, typer.Option(help="torch intra-op threads.")] = None,
    http_port: HttpPort = None,
    http_host: HttpHost = None,
    metrics_port: MetricsPort = None,
    log_format: LogFormatOption = "text",
) -> None:
    """Serve requests from the lane topics until Ctrl-C; results to Kafka and SQL.

    HTTP on port 9400 by default: /metrics, /healthz, /readyz and a status page at /."""
    from storage import redacted_url
    from worker.ops.logs import configure
    from worker.serve import load_registry, serve, tune_process, with_broker

    _terminate_like_ctrl_c()
    configure(log_format)
    settings = _settings(
        bootstrap=bootstrap,
        database_url=database,
        models=models,
        group_id=group_id,
        max_batch=max_batch,
        max_wait_ms=max_wait_ms,
        partitions=partitions,
        single_lane=single_lane,
        torch_threads=torch_threads,
        http_port=http_port if http_port is not None else metrics_port,
        http_host=http_host,
    )
    tune_process(settings)
    registry = load_registry(settings.models, settings.device)
    with contextlib.suppress(KeyboardInterrupt), with_broker(settings) as resolved:
        console.print(
            f"inferlane serving {', '.join(registry.names())} from [bold]{resolved.bootstrap}[/] "
            f"into {redacted_url(resolved.database_url)}"
        )
        asyncio.run(serve(resolved, registry))


@app.command()
def broker(port: Annotated[int, typer.Option(help="Port to listen on.")] = 9092) -> None:
    """Run the embedded Kafka-compatible broker (Tansu, memory only) in the foreground."""
    _terminate_like_ctrl_c()
    # Ctrl-C at any moment, even during startup, is the way to stop: exit cleanly.
    with contextlib.suppress(KeyboardInterrupt), EmbeddedBroker(port=port) as b:
        console.print(f"broker listening on [bold]{b.bootstrap}[/]; Ctrl-C stops it")
        b.wait()


def _terminate_like_ctrl_c() -> None:
    """SIGTERM (docker stop, systemd) stops as gracefully as Ctrl-C does."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


@app.command()
def publish(
    file: Annotated[Path, typer.Argument(help="JSON Lines: one request per line.", exists=True)],
    bootstrap: Bootstrap = None,
    topic: Annotated[str, typer.Option(help="Topic to publish to.")] = "inferlane.requests",
) -> None:
    """Publish each line as it is (bad lines too: the worker dead-letters them)."""
    from consumers.client import InferlaneClient

    if bootstrap is None:
        raise typer.BadParameter("--bootstrap (or INFERLANE_BOOTSTRAP) is required")
    sent = 0
    security = WorkerSettings().kafka.security  # INFERLANE_KAFKA__SECURITY__* from env
    with InferlaneClient(bootstrap, security=security) as client, file.open("rb") as lines:
        for line in lines:
            value = line.rstrip(b"\r\n")
            if value:
                client.send_raw(value, key=_key_of(value), topic=topic)
                sent += 1
        client.flush()
    console.print(f"published {sent} records to {topic}")


def _key_of(value: bytes) -> bytes | None:
    try:
        rid = orjson.loads(value).get("request_id")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return rid.encode() if isinstance(rid, str) else None


@app.command()
def demo(
    digits: Annotated[int, typer.Option(help="digits requests.")] = 6000,
    diabetes: Annotated[int, typer.Option(help="diabetes requests.")] = 1000,
    minilm: Annotated[int, typer.Option(help="minilm requests.")] = 600,
    database: Database = None,
) -> None:
    """Embedded broker + SQLite + demo models: a labelled mixed workload, then a report."""
    from storage import redacted_url
    from worker.demo import render, run_demo, workload
    from worker.serve import load_registry, with_broker

    url = database or "sqlite:///inferlane-demo.db"
    if url.startswith("sqlite:///") and database is None:
        # A fresh file each time, so the report counts this run only.
        Path(url.removeprefix("sqlite:///")).unlink(missing_ok=True)
    with console.status("building or loading the demo models"):
        registry = load_registry(None)
    settings = _settings(database_url=url, bootstrap=os.environ.get("INFERLANE_BOOTSTRAP"))
    with with_broker(settings) as resolved:
        database_shown = redacted_url(resolved.database_url)
        console.print(f"broker {resolved.bootstrap}, database {database_shown}")
        items = workload(digits, diabetes, minilm, resolved)
        report = asyncio.run(run_demo(resolved, registry, items, console))
    render(report, console)


app.command("publish-demo")(publish_demo)
register_drift_commands(app)
