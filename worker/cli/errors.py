"""Where a failed ``inferlane`` command becomes one or two lines on stderr and an exit code.

Exit code 2: a usage error (a flag, an environment variable or a file the user gave is
wrong); 1: a runtime error (the database, the broker or a port is not as it must be).
Commands raise ``UsageFailed`` / ``CommandFailed`` where they know the bad value; the
lower layers' own typed errors that say too little are translated in ``explain``. Any
other exception is a bug and keeps its traceback; ``--debug`` (or ``INFERLANE_DEBUG=1``)
shows the traceback of every failure.
"""

from __future__ import annotations

import errno
import inspect
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import typer

# typer carries its own copy of click; these have no public name in typer.
from typer._click.core import Command, Context
from typer._click.exceptions import NoArgsIsHelpError, UsageError
from typer.core import TyperGroup

if TYPE_CHECKING:
    from pydantic import ValidationError

DEBUG_ENV = "INFERLANE_DEBUG"
DATABASE_FIX = "check --database (or INFERLANE_DATABASE_URL)"
BOOTSTRAP_FIX = "check --bootstrap (or INFERLANE_BOOTSTRAP) and that the broker runs"
SECURITY_FIX = ", and its TLS and SASL settings (INFERLANE_KAFKA__SECURITY__*)"


class CommandFailed(Exception):
    """A runtime failure the user can act on: ``message`` names the value, ``fix`` says
    what to do about it."""

    exit_code: ClassVar[int] = 1

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix


class UsageFailed(CommandFailed):
    """What the user gave (a flag, a setting, a registry file) is wrong."""

    exit_code: ClassVar[int] = 2


def explain(exc: BaseException) -> CommandFailed | None:
    """The failure a lower layer's typed error stands for; None for anything else."""
    if isinstance(exc, CommandFailed):
        return exc
    from aiokafka.errors import KafkaConnectionError
    from kafka.errors import NoBrokersAvailable
    from pydantic import ValidationError
    from sqlalchemy.exc import InterfaceError, OperationalError

    from consumers.broker_check import BrokerUnreachable
    from storage import StoreUnavailable
    from worker.intake.broker import BrokerStartFailed
    from worker.settings.env import settings_problems

    if isinstance(exc, ValidationError) and exc.title == "WorkerSettings":
        return UsageFailed(f"invalid setting: {settings_problems(exc)}", "fix or unset it")
    if isinstance(exc, StoreUnavailable):
        return CommandFailed(f"the database is unavailable: {exc}", DATABASE_FIX)
    if isinstance(exc, OperationalError | InterfaceError):
        return CommandFailed(f"the database is unavailable: {first_line(exc.orig)}", DATABASE_FIX)
    if isinstance(exc, BrokerUnreachable):
        return CommandFailed(str(exc), BOOTSTRAP_FIX + SECURITY_FIX)
    if isinstance(exc, BrokerStartFailed):
        return CommandFailed(
            f"the embedded {exc}", "see --debug; or run a broker and give --bootstrap"
        )
    if isinstance(exc, NoBrokersAvailable | KafkaConnectionError):
        return CommandFailed(f"no Kafka broker answered ({exc})", BOOTSTRAP_FIX)
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        return CommandFailed(
            f"address in use: {exc.strerror or exc}",
            "pick another port (--http-port for the worker's HTTP surface; 0 turns it off)",
        )
    return None


def problems(exc: ValidationError) -> str:
    """A pydantic validation error in one line: ``where: what`` for each problem."""
    parts = []
    for error in exc.errors():
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"])
        what = "unknown field (a typo?)" if error["type"] == "extra_forbidden" else error["msg"]
        parts.append(f"{where.lstrip('.') or 'the file'}: {what}")
    return "; ".join(parts)


def first_line(error: BaseException | None) -> str:
    """A driver's own message without what wrappers append (statements, links)."""
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def warn(message: str) -> None:
    """A warning the command goes on after (a deprecated flag), on stderr."""
    typer.echo(f"warning: {message}", err=True)


class CliGroup(TyperGroup):
    """The root command group: runs the command and reports how it failed."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        _reflow(self)

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        try:
            value = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
            code = value if isinstance(value, int) else 0
        except typer.Abort:
            typer.echo("aborted", err=True)
            code = 130
        except typer.TyperException as exc:  # click's usage errors among them
            code = _report_click(exc)
        except Exception as exc:
            failure = explain(exc)
            if failure is None or _debug(argv):
                raise
            _report(self._path(argv), failure)
            code = failure.exit_code
        if standalone_mode:
            sys.exit(code)
        return code

    def _path(self, argv: list[str]) -> str:
        """``inferlane`` and the (sub)command names that ``argv`` starts with."""
        path = ["inferlane"]
        group: Command = self
        for arg in (a for a in argv if not a.startswith("-")):
            command = group.commands.get(arg) if isinstance(group, TyperGroup) else None
            if command is None:
                break
            path.append(arg)
            group = command
        return " ".join(path)

    def resolve_command(
        self, ctx: Context, args: list[str]
    ) -> tuple[str | None, Command | None, list[str]]:
        # The root callback checks the environment unless the user asked for help.
        ctx.meta["inferlane.help"] = any(a in ctx.help_option_names for a in args)
        return super().resolve_command(ctx, args)


def _reflow(command: Command) -> None:
    """Docstrings wrap at the code's width; typer's help keeps those line breaks, which
    then cut sentences in two. Each paragraph becomes one line that the terminal wraps."""
    if command.help:
        paragraphs = inspect.cleandoc(command.help).split("\n\n")
        command.help = "\n\n".join(" ".join(p.split()) for p in paragraphs)
    for sub in getattr(command, "commands", {}).values():
        _reflow(sub)


def _debug(argv: list[str]) -> bool:
    """``--debug`` before the command's name, or ``INFERLANE_DEBUG`` set."""
    options = argv[: next((i for i, a in enumerate(argv) if not a.startswith("-")), len(argv))]
    return "--debug" in options or os.environ.get(DEBUG_ENV, "") not in ("", "0", "false")


def _report(where: str, failure: CommandFailed) -> None:
    typer.echo(f"{where}: error: {failure.message}", err=True)
    if failure.fix:
        typer.echo(f"  {failure.fix}", err=True)


def _report_click(exc: typer.TyperException) -> int:
    if isinstance(exc, NoArgsIsHelpError):
        return exc.exit_code  # the help is the message, and typer has printed it
    message = exc.format_message()  # names the option, and its env var when it has one
    if not isinstance(exc, UsageError) or exc.ctx is None:
        typer.echo(f"inferlane: error: {message}", err=True)
    else:
        typer.echo(f"{exc.ctx.command_path}: error: {message}", err=True)
        typer.echo(f"  see '{exc.ctx.command_path} --help'", err=True)
    return exc.exit_code
