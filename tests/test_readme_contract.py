"""The README's wire contract is the code's: request fields, result fields, error codes.

Users build producers and consumers from the README alone, so a field or an error code
the code has and the README lacks (or the reverse) is a bug in one of them.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

from consumers.contract import InferenceRequest, InferenceResult, Status
from consumers.errors import InferlaneError

README = (Path(__file__).parent.parent / "README.md").read_text()


def _section(title: str) -> str:
    start = README.index(f"## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end >= 0 else None]


def _table_keys(text: str) -> list[str]:
    """The backticked names in the first column of every table row of ``text``."""
    keys: list[str] = []
    for line in text.splitlines():
        if line.startswith("| `"):
            first = line.split("|")[1]
            keys.extend(re.findall(r"`([a-z_]+)`", first))
    return keys


def _error_table() -> list[str]:
    wire = _section("Wire contract (v1)")
    return _table_keys(wire[wire.index("Error codes") :])


def _emitted_codes() -> set[str]:
    """Every ``code`` an error class of ours carries, except retried ones (never
    emitted: the same work runs again) and the abstract base."""
    for package in ("consumers", "storage", "worker"):
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, f"{package}."):
            if ".migrations" not in info.name and not info.name.endswith("__main__"):
                importlib.import_module(info.name)
    codes: set[str] = set()
    pending: list[type] = [Exception]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        code = cls.__dict__.get("code")
        ours = cls.__module__.split(".")[0] in {"consumers", "storage", "worker"}
        if ours and isinstance(code, str) and not getattr(cls, "retriable", False):
            codes.add(code)
    return codes - {InferlaneError.code}


def test_every_error_code_the_code_emits_is_in_the_readme_table() -> None:
    documented = set(_error_table())
    emitted = _emitted_codes()
    assert emitted - documented == set(), "error codes missing from README's table"
    assert documented - emitted == set(), "README's table lists codes the code never emits"


def test_request_table_lists_the_request_model_fields() -> None:
    wire = _section("Wire contract (v1)")
    request_table = wire[: wire.index("A result")]
    assert set(_table_keys(request_table)) == set(InferenceRequest.model_fields)


def test_result_paragraph_names_every_result_field_and_status() -> None:
    wire = _section("Wire contract (v1)")
    paragraph = wire[wire.index("A result") : wire.index("A dead letter")]
    named = set(re.findall(r"`([a-z_]+)`", paragraph))
    assert set(InferenceResult.model_fields) <= named
    assert {s.value for s in Status} <= named


def test_relative_timeout_is_documented_from_the_kafka_timestamp() -> None:
    """Admission counts ``timeout_ms`` from the record's Kafka timestamp, so a replay
    after a restart gets no fresh timeout (worker/intake/admission.py)."""
    row = next(line for line in README.splitlines() if line.startswith("| `timeout_ms`"))
    assert "Kafka timestamp" in row
