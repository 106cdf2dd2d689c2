"""Every ``inferlane`` command's help is whole: its summary (the command list's line)
and each option's and argument's help end as a sentence does, and no paragraph of the
help as printed stops mid-sentence."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from worker.cli import app

# A help text ends where a sentence can: ". ! ?", or a closing bracket after one.
WHOLE = re.compile(r"[.!?][)\]]?$")


def commands() -> Iterator[tuple[str, Any]]:
    """Every command and group, by the words that invoke it (typer's click objects)."""
    root = typer.main.get_command(app)

    def walk(path: str, command: Any) -> Iterator[tuple[str, Any]]:
        yield path, command
        for name, sub in getattr(command, "commands", {}).items():
            if not sub.hidden:
                yield from walk(f"{path} {name}", sub)

    yield from walk("inferlane", root)


COMMANDS = dict(commands())


def test_the_walk_finds_every_command() -> None:
    assert {"inferlane run", "inferlane results", "inferlane models list"} <= COMMANDS.keys()
    assert len(COMMANDS) >= 25


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_help_is_whole(path: str) -> None:
    command = COMMANDS[path]
    summary = inspect.cleandoc(command.help or "").split("\n\n")[0]
    problems = []
    if not WHOLE.search(summary):
        problems.append(f"summary does not end a sentence: {summary!r}")
    for param in command.params:
        if getattr(param, "hidden", False) or param.name == "help":
            continue
        text = " ".join((getattr(param, "help", None) or "").split())
        if not WHOLE.search(text):
            problems.append(f"{param.opts[0]}: help {text!r} is not a sentence")
    assert not problems, f"{path}: {problems}"


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_help_prints_whole_sentences(path: str) -> None:
    # Wide enough that nothing wraps: each line of the description is a whole paragraph.
    shown = CliRunner().invoke(app, [*path.split()[1:], "--help"], env={"COLUMNS": "400"})
    assert shown.exit_code == 0, shown.output
    assert "Usage: " in shown.output and "Traceback" not in shown.output
    description = shown.output.split("Usage: ", 1)[1].split("╭", 1)[0].splitlines()[1:]
    for line in filter(None, (line.strip() for line in description)):
        assert WHOLE.search(line), f"{path}: help breaks mid-sentence: {line!r}"
