"""``inferlane models``: list, check and build model registries."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from worker.cli.options import Models, renamed

if TYPE_CHECKING:
    from worker.models.listing import ModelRow
    from worker.models.registry import ModelRegistry

# Model code (torch) is imported inside the commands: `inferlane --help` stays quick.
app = typer.Typer(help="Model registries: list, check, build the demo.", no_args_is_help=True)
console = Console()

# The registry as an argument: the old form of --models, still accepted.
Registry = Annotated[
    Path | None,
    typer.Argument(
        help="Old form of --models.",
        exists=True,
        dir_okay=False,
        hidden=True,
        callback=renamed("the registry as an argument", "--models FILE"),
    ),
]


def _open(registry: Path | None) -> ModelRegistry:
    from worker.cli.registry import check_registry
    from worker.demo.models import ensure_demo_models
    from worker.models.registry import ModelRegistry

    path = registry if registry is not None else ensure_demo_models()
    check_registry(path)
    return ModelRegistry.from_toml(path)


@app.command("list")
def list_models(
    registry: Registry = None,
    models_file: Models = None,
    load: Annotated[bool, typer.Option(help="Load each model to measure its bytes.")] = False,
    url: Annotated[
        str | None,
        typer.Option(
            help="A running worker's HTTP address (http://HOST:9400): its models as they are "
            "now. Unset: the registry as this command sees it.",
        ),
    ] = None,
) -> None:
    """Name, version, format, tier, bytes and last use of each model."""
    from worker.models.listing import model_rows

    rows: list[ModelRow]
    if url is not None:
        if load or models_file or registry:
            raise typer.BadParameter("--url shows the worker's own models: no --models, --load")
        rows = _live_rows(url)
        title = f"models of the worker at {url} (live)"
    else:
        models = _open(models_file or registry)
        if load:
            for name in models.names():
                models.ensure(name).exception()  # a failure shows as the model on disk
        rows = model_rows(models)
        models.close()
        title = (
            "models of the registry (this command's own process; "
            "--url http://HOST:9400 shows a running worker's tiers)"
        )
    table = Table("name", "version", "format", "tier", "bytes", "last used", title=title)
    for r in rows:
        used = "-"
        if r.last_used_s is not None:
            used = datetime.datetime.fromtimestamp(r.last_used_s).isoformat("T", "seconds")
        table.add_row(r.name, r.version, r.format, r.tier, f"{r.bytes:,}", used)
    console.print(table)


def _live_rows(url: str) -> list[ModelRow]:
    """The worker's ``/models.json``; exit 1 with the reason if it does not answer."""
    import urllib.request

    import orjson

    from worker.models.listing import ModelRow

    address = url.rstrip("/") + "/models.json"
    try:
        with urllib.request.urlopen(address, timeout=10) as resp:
            body = orjson.loads(resp.read())
        return [ModelRow(**row) for row in body["models"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        console.print(f"[red]no model list from a worker at {address}: {exc}[/]")
        raise typer.Exit(1) from None


@app.command()
def check(registry: Registry = None, models_file: Models = None) -> None:
    """Load each model and run its example; report every error without serving."""
    from worker.demo.models import ensure_demo_models
    from worker.models.registry import ModelRegistry

    registry = models_file or registry or ensure_demo_models()
    try:
        models = ModelRegistry.from_toml(registry)
    except Exception as exc:
        console.print(f"[red]invalid registry[/] {registry}: {exc}")
        raise typer.Exit(2) from exc
    failed = 0
    for name in models.names():
        try:
            model = models.ensure(name).result()
            model.run([model.adapter.prepare(model.adapter.example())])
        except Exception as exc:
            failed += 1
            console.print(f"[red]FAIL[/] {name}: {exc}")
            continue
        console.print(f"[green]ok[/]   {name} (version {model.version})")
    models.close()
    if failed:
        raise typer.Exit(1)


@app.command("build-demo")
def build_demo(
    folder: Annotated[
        Path, typer.Argument(file_okay=False, help="Folder to write the registry and models in.")
    ],
    copies: Annotated[int, typer.Option(min=0, help="Also N copies of digits.")] = 0,
) -> None:
    """Build the demo registry in FOLDER; with --copies, N digits copies in FOLDER/copies."""
    from worker.demo.copies import write_copies
    from worker.demo.models import ensure_demo_models

    console.print(f"demo registry: {ensure_demo_models(folder)}")
    if copies:
        console.print(f"{copies} copies: {write_copies(folder, copies)}")


@app.command()
def reload(registry: Registry = None, models_file: Models = None) -> None:
    """Validate the registry, then touch it: running workers that serve it reload it now."""
    import os

    from worker.models.specs import RegistryFile

    registry = models_file or registry
    if registry is None:
        raise typer.BadParameter("give the registry to reload", param_hint="--models")
    try:
        models = RegistryFile.from_toml(registry).models
    except Exception as exc:
        console.print(f"[red]invalid registry, not touched[/] {registry}: {exc}")
        raise typer.Exit(2) from exc
    os.utime(registry)
    console.print(f"{registry}: {len(models)} models; workers watching it reload it")
