"""Command-line options that several ``inferlane`` commands share: one flag name for one
thing (``--database``, ``--models``, ``--bootstrap``), and the old names still accepted."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, TypeVar

import typer

from worker.cli.database import checked_url
from worker.cli.errors import warn

T = TypeVar("T")

Database = Annotated[
    str | None,
    typer.Option(
        "--database",
        "-d",
        envvar="INFERLANE_DATABASE_URL",
        callback=checked_url,
        help=(
            "SQLAlchemy URL: sqlite:///file.db or postgresql://user@host/db "
            "(unset: sqlite:///inferlane.db; for the demo, sqlite:///inferlane-demo.db)."
        ),
    ),
]
Models = Annotated[
    Path | None,
    typer.Option(
        "--models",
        envvar="INFERLANE_MODELS",
        dir_okay=False,
        help="Model registry TOML; unset: the demo models.",
    ),
]
Bootstrap = Annotated[
    str,
    typer.Option(
        "--bootstrap",
        "-b",
        envvar="INFERLANE_BOOTSTRAP",
        help=(
            "Kafka bootstrap servers, host:port[,host:port]; `inferlane broker` listens on "
            "127.0.0.1:9092 by default."
        ),
    ),
]


def database_url(given: str | None) -> str:
    """The ``--database`` given, else the worker's (``INFERLANE_DATABASE_URL`` or its default)."""
    from worker.settings import WorkerSettings

    return given or WorkerSettings().database_url


def renamed(old: str, new: str) -> Callable[[T], T]:
    """An option callback: the value as it is, with a warning when ``old`` was used."""

    def warn_if_used(value: T) -> T:
        if value is not None:
            warn(f"{old} is deprecated and will go away; use {new}")
        return value

    return warn_if_used
