"""The database as the command line opens it: a ``--database`` URL checked as it is given,
and read-only commands that never create a database."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer
from sqlalchemy import Engine, inspect, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from storage import make_engine, redacted_url
from worker.cli.errors import CommandFailed
from worker.ops.logs import scrub

DEMO_DATABASE = "sqlite:///inferlane-demo.db"
_FORMS = "sqlite:///file.db or postgresql://user@host/db"


def checked_url(value: str | None) -> str | None:
    """``--database`` (or ``INFERLANE_DATABASE_URL``): a URL SQLAlchemy parses, whose
    driver is installed. Nothing is opened or created."""
    if value is None:
        return None
    try:
        url = make_url(value)
    except ArgumentError:
        shown = scrub(value)
        hint = f"for SQLite write sqlite:///{shown}" if "://" not in value else f"write {_FORMS}"
        raise typer.BadParameter(f"not a database URL: {shown!r}; {hint}") from None
    if url.get_backend_name() != "sqlite":
        try:
            make_engine(value).dispose()  # loads the driver; connects to nothing
        except NoSuchModuleError:
            raise typer.BadParameter(
                f"unknown kind of database {url.get_backend_name()!r} in {redacted_url(value)}; "
                f"write {_FORMS}"
            ) from None
        except ModuleNotFoundError as exc:
            missing = exc.name or "its driver"
            fix = (
                "install it: .venv/bin/pip install -e '.[postgres]'"
                if missing.startswith("psycopg")
                else f"install it: .venv/bin/pip install {missing}"
            )
            raise CommandFailed(
                f"{redacted_url(value)} needs the {missing} driver, which is not installed", fix
            ) from None
    return value


def reading_engine(url: str, table: str, *, default: bool) -> Engine:
    """An engine on a database that holds ``table``: a SQLite file that does not exist
    is refused, not created. ``default``: the URL is the default, not the user's."""
    shown = redacted_url(url)
    parsed = make_url(url)
    file = parsed.database if parsed.get_backend_name() == "sqlite" else None
    if file not in (None, "", ":memory:") and not parsed.query.get("uri"):
        path = Path(str(file))
        if not path.exists():
            raise CommandFailed(f"no database at {path} ({shown})", _where_to_look(default))
    engine = make_engine(url)
    try:
        found = inspect(engine).has_table(table)
    except BaseException:
        engine.dispose()
        raise
    if not found:
        engine.dispose()
        raise CommandFailed(
            f"{shown} has no {table} table: no inferlane worker has written to it",
            _where_to_look(default),
        )
    return engine


@contextmanager
def existing_database(url: str, table: str, *, default: bool) -> Iterator[Engine]:
    """``reading_engine`` on a database brought to the current schema (an existing one,
    as the worker migrates it; a missing one is still refused), disposed of after."""
    from storage import upgrade

    engine = reading_engine(url, table, default=default)
    try:
        upgrade(engine)
        yield engine
    finally:
        engine.dispose()


def _where_to_look(default: bool) -> str:
    demo = make_url(DEMO_DATABASE).database
    if default and demo is not None and Path(demo).exists():
        return f"the demo wrote {DEMO_DATABASE}: add --database {DEMO_DATABASE}"
    return (
        "give --database (or INFERLANE_DATABASE_URL) the URL that `inferlane run` or "
        f"`inferlane demo` wrote to (the demo's: {DEMO_DATABASE})"
    )
