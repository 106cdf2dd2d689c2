"""The ``inferlane`` command line: run, broker, publish, results, demo; models, jobs, rollouts."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import sys
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console

from worker.base.ports import PortInUse, refuse_taken
from worker.cli.database import DEMO_DATABASE
from worker.cli.drift import register as register_drift_commands
from worker.cli.errors import DEBUG_ENV, CliGroup, CommandFailed, UsageFailed
from worker.cli.jobs import jobs_app, score
from worker.cli.models import app as models_app
from worker.cli.ops import HttpHost, HttpPort, LogFormatOption, MetricsPort, publish_demo
from worker.cli.options import Bootstrap, Database, Models, database_url
from worker.cli.results import results
from worker.cli.rollout import rollout_app
from worker.intake.broker import EmbeddedBroker
from worker.settings import WorkerSettings

app = typer.Typer(cls=CliGroup, no_args_is_help=True)
app.add_typer(models_app, name="models")
app.command()(score)
app.add_typer(jobs_app, name="jobs")
app.add_typer(rollout_app, name="rollout")
console = Console()

EmbeddedOrBootstrap = Annotated[
    str | None,
    typer.Option(
        "--bootstrap",
        "-b",
        envvar="INFERLANE_BOOTSTRAP",
        help="Kafka bootstrap servers, host:port[,host:port]; unset: start an embedded broker.",
    ),
]


@app.callback()
def root(
    ctx: typer.Context,
    debug: Annotated[
        bool,
        typer.Option(
            "--debug", envvar=DEBUG_ENV, help="Show the traceback of a failure, not one line."
        ),
    ] = False,
) -> None:
    """Kafka-driven inference worker: serve models from Kafka topics, into Kafka and SQL.

    Read results back, score files, query drift and roll out model versions. Exit codes:
    0 done, 1 a runtime failure (database, broker, port), 2 a usage error."""
    from worker.settings.env import unknown_variables

    if ctx.resilient_parsing or ctx.meta.get("inferlane.help"):
        return
    unknown = unknown_variables(os.environ)
    if unknown:
        names = ", ".join(
            f"{name} (did you mean {close}?)" if close else name for name, close in unknown
        )
        raise UsageFailed(
            f"unknown setting in the environment: {names}",
            "fix or unset it; README.md, Configuration, lists the settings",
        )


def settings_from_flags(**flags: Any) -> WorkerSettings:
    """Env and defaults, overridden by the flags that were given."""
    given = {k: v for k, v in flags.items() if v is not None}
    nested: dict[str, dict[str, Any]] = {}
    for key in ("max_batch", "max_wait_ms"):
        if key in given:
            nested.setdefault("batching", {})[key] = given.pop(key)
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
    bootstrap: EmbeddedOrBootstrap = None,
    database: Database = None,
    models: Models = None,
    group_id: Annotated[str | None, typer.Option(help="Kafka consumer group.")] = None,
    max_batch: Annotated[int | None, typer.Option(help="Largest batch.")] = None,
    max_wait_ms: Annotated[float | None, typer.Option(help="Longest wait to fill a batch.")] = None,
    partitions: Annotated[int | None, typer.Option(help="Partitions of topics we create.")] = None,
    torch_threads: Annotated[int | None, typer.Option(help="torch intra-op threads.")] = None,
    http_port: HttpPort = None,
    http_host: HttpHost = None,
    metrics_port: MetricsPort = None,
    log_format: LogFormatOption = "text",
) -> None:
    """Serve requests from the lane topics until Ctrl-C; results to Kafka and SQL.

    HTTP on port 9400 by default: /metrics, /healthz, /readyz and a status page at /."""
    from consumers.broker_check import require_broker
    from storage import redacted_url
    from worker.cli.registry import load_registry
    from worker.launch import serve, tune_process, with_broker
    from worker.ops.logs import configure

    _terminate_like_ctrl_c()
    configure(log_format)
    settings = settings_from_flags(
        bootstrap=bootstrap,
        database_url=database,
        models=models,
        group_id=group_id,
        max_batch=max_batch,
        max_wait_ms=max_wait_ms,
        partitions=partitions,
        torch_threads=torch_threads,
        http_port=http_port if http_port is not None else metrics_port,
        http_host=http_host,
    )
    tune_process(settings)
    registry = load_registry(settings.models, settings.device)
    # Checked before anything is opened or created; the worker itself serves on without
    # its HTTP port, but a user who starts it wants the port.
    _http_port_free(settings)
    if settings.bootstrap is not None:
        require_broker(settings.bootstrap, settings.kafka.security)
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
    code = 0
    # Ctrl-C at any moment, even during startup, is the way to stop: exit cleanly.
    with contextlib.suppress(KeyboardInterrupt):
        try:
            embedded = EmbeddedBroker(port=port).start()
        except PortInUse as exc:
            raise CommandFailed(
                f"port {exc.port} on {exc.host} is already in use",
                "stop what listens there, or pick another port: inferlane broker --port N",
            ) from None
        try:
            console.print(f"broker listening on [bold]{embedded.bootstrap}[/]; Ctrl-C stops it")
            code = embedded.wait()
        finally:
            embedded.stop()
    if code != 0:
        raise CommandFailed(f"the broker exited with code {code}")


def _http_port_free(settings: WorkerSettings) -> None:
    ops = settings.ops
    if ops.http_port == 0:
        return
    try:
        refuse_taken(ops.http_host, ops.http_port)
    except PortInUse:
        raise CommandFailed(
            f"HTTP port {ops.http_port} on {ops.http_host} is already in use",
            "pick another with --http-port N (or INFERLANE_OPS__HTTP_PORT), or 0 for no HTTP",
        ) from None


def _terminate_like_ctrl_c() -> None:
    """SIGTERM (docker stop, systemd) stops as gracefully as Ctrl-C does."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


@app.command()
def publish(
    file: Annotated[Path, typer.Argument(help="JSON Lines: one request per line.", exists=True)],
    bootstrap: Bootstrap,
    topic: Annotated[str, typer.Option(help="Topic to publish to.")] = "inferlane.requests",
) -> None:
    """Publish each line as it is (bad lines too: the worker dead-letters them)."""
    from consumers.broker_check import require_broker
    from consumers.client import InferlaneClient

    sent = 0
    security = WorkerSettings().kafka.security  # INFERLANE_KAFKA__SECURITY__* from env
    require_broker(bootstrap, security)
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
    digits: Annotated[int, typer.Option(help="Number of digits requests.")] = 6000,
    diabetes: Annotated[int, typer.Option(help="Number of diabetes requests.")] = 1000,
    minilm: Annotated[int, typer.Option(help="Number of minilm requests.")] = 600,
    tinylm: Annotated[
        int, typer.Option(help="Number of prompts for the generative model, streamed.")
    ] = 4,
    database: Database = None,
    http_port: HttpPort = None,
) -> None:
    """A labelled mixed workload through an embedded broker, SQLite and the demo models,
    then a few prompts whose text streams from the generative demo model.

    Then a report, and the commands that query what it wrote."""
    from storage import redacted_url
    from worker.cli.registry import load_registry
    from worker.demo.generative_model import ensure_generative_demo
    from worker.demo.run import render, run_demo, workload
    from worker.launch import with_broker

    url = database or DEMO_DATABASE
    settings = settings_from_flags(
        database_url=url, bootstrap=os.environ.get("INFERLANE_BOOTSTRAP"), http_port=http_port
    )
    if http_port is not None:
        # A port asked for must be free; with the default taken, the demo's worker runs
        # without its status page (as a Worker does), so the first command still works.
        _http_port_free(settings)
    if url.startswith("sqlite:///") and database is None:
        # A fresh file each time, so the report counts this run only.
        Path(url.removeprefix("sqlite:///")).unlink(missing_ok=True)
    with console.status("building or loading the demo models"):
        registry = load_registry(ensure_generative_demo())
    with with_broker(settings) as resolved:
        database_shown = redacted_url(resolved.database_url)
        console.print(f"broker {resolved.bootstrap}, database {database_shown}")
        items = workload(digits, diabetes, minilm, resolved, tinylm)
        report = asyncio.run(run_demo(resolved, registry, items, console))
    render(report, console)
    _next_steps(url, report.thresholds)


def _next_steps(url: str, thresholds: dict[str, float]) -> None:
    """The commands that read what the demo wrote, runnable exactly as printed: the
    anomalies of each model at the threshold the demo's table used."""
    from storage import redacted_url

    shown = redacted_url(url)
    flag = "" if url == database_url(None) else f" --database {shlex.quote(shown)}"
    program = _program()
    # Plain lines, never wrapped: each command must work as it is copied.
    typer.echo(f"\nThe demo wrote its results, drift log and windows to {shown}. Next:")
    for model, threshold in sorted(thresholds.items()):
        typer.echo(f"  {program} anomalies{flag} --model {model} --threshold {threshold:.4g}")
    typer.echo(f"  {program} drift{flag}")
    if flag and shown != url:
        typer.echo("  (with the database password, which is not printed)")


def _program() -> str:
    """How this command line was started, as a user would type it again."""
    script = Path(os.path.abspath(sys.argv[0]))
    if script.name != "inferlane":  # python -m worker
        return f"{shlex.quote(sys.executable)} -m worker"
    with contextlib.suppress(ValueError):
        return shlex.quote(f"./{script.relative_to(Path.cwd())}")  # ./: not looked up in PATH
    return shlex.quote(str(script))


app.command("publish-demo")(publish_demo)
app.command()(results)
register_drift_commands(app)
