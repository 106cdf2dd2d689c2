"""The ``inferlane`` command line: one module per command group."""

from worker.cli.main import app

__all__ = ["app"]
