"""The ``INFERLANE_*`` environment as settings: names that match none, and bad values.

pydantic-settings reads the variables that match a setting and ignores the rest, so a
typo (``INFERLANE_BATCHNG__MAX_BATCH``) would silently leave the default in force.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping

from pydantic import BaseModel, ValidationError

from worker.settings import WorkerSettings

PREFIX = "INFERLANE_"
NESTED = "__"
# Variables inferlane reads that are not settings: the demo models' cache, --debug,
# and the databases of the tests and benchmarks.
OTHER_VARIABLES = frozenset(
    {"MODEL_CACHE", "DEBUG", "TEST_PG_URL", "BENCH_PG_URL", "KEEP_SCREENSHOT"}
)


def setting_names() -> list[str]:
    """Every variable that sets something, nested settings with ``__``."""
    return sorted(PREFIX + NESTED.join(path).upper() for path in _paths(WorkerSettings, ()))


def unknown_variables(environ: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """``INFERLANE_*`` names that set nothing, each with the setting it most resembles."""
    known = setting_names()
    known_set = set(known)  # sections too: pydantic-settings reads them as JSON objects
    unknown = []
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(PREFIX) or upper.removeprefix(PREFIX) in OTHER_VARIABLES:
            continue
        if upper in known_set:
            continue
        close = difflib.get_close_matches(upper, known, n=1)
        unknown.append((name, close[0] if close else None))
    return unknown


def settings_problems(exc: ValidationError) -> str:
    """A settings validation error in one line: each problem with its setting, the
    variable that sets it, and the value (secrets left out)."""
    parts = []
    for error in exc.errors():
        path = [str(part) for part in error["loc"]]
        name = PREFIX + NESTED.join(path).upper()
        value = "***" if "PASSWORD" in name else repr(error["input"])
        parts.append(f"{'.'.join(path)}={value} ({name}): {error['msg']}")
    return "; ".join(parts)


def _paths(model: type[BaseModel], prefix: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    for name, field in model.model_fields.items():
        path = (*prefix, name)
        yield path  # a section may also be given whole, as a JSON object
        kind = field.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            yield from _paths(kind, path)
