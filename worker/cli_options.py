"""Command-line options that several ``inferlane`` commands share."""

from __future__ import annotations

from typing import Annotated

import typer

Database = Annotated[
    str | None,
    typer.Option(
        "--database",
        "-d",
        envvar="INFERLANE_DATABASE_URL",
        help=(
            "SQLAlchemy URL: sqlite:///file.db or postgresql://user@host/db "
            "(unset: sqlite:///inferlane.db; for the demo, sqlite:///inferlane-demo.db)."
        ),
    ),
]


def database_url(given: str | None) -> str:
    """The ``--database`` given, else the worker's (``INFERLANE_DATABASE_URL`` or its default)."""
    from worker.config import WorkerSettings

    return given or WorkerSettings().database_url
