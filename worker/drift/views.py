"""Drift windows as the CLI and the report show them: merged, judged, JSON-ready."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from storage.drift_records import Reference, merge_windows
from storage.drift_windows import load_references, read_windows
from worker.drift.evaluate import Verdict, evaluate
from worker.settings import WorkerSettings
from worker.settings.drift_thresholds import DriftThresholds

_SPAN = re.compile(r"^(\d+)\s*(s|m|h|d)$")
_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_span_s(text: str) -> int | None:
    """ "90s", "5m", "1h", "2d" in seconds; None when ``text`` is not a span."""
    match = _SPAN.match(text.strip().lower())
    return int(match[1]) * _UNITS_S[match[2]] if match else None


def parse_since(text: str, now: datetime) -> datetime:
    """A span back from ``now`` ("1d") or an ISO time (UTC when it has no zone)."""
    span = parse_span_s(text)
    if span is not None:
        return now - timedelta(seconds=span)
    at = datetime.fromisoformat(text)
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Window:
    """``--window``: a span ("5m") or a row count ("1000")."""

    span_s: int | None = None
    rows: int | None = None

    @classmethod
    def parse(cls, text: str | None) -> Window:
        if text is None:
            return cls()
        span = parse_span_s(text)
        if span is not None:
            return cls(span_s=span)
        if text.strip().isdigit() and int(text) > 0:
            return cls(rows=int(text))
        raise ValueError(f"--window takes a span (90s, 5m, 1h, 1d) or a row count: {text!r}")


def thresholds_for(models: Path | None) -> tuple[DriftThresholds, dict[str, DriftThresholds]]:
    """The default thresholds (env ``INFERLANE_DRIFT__THRESHOLDS__*``) and the registry's."""
    default = WorkerSettings().drift.thresholds
    per_model: dict[str, DriftThresholds] = {}
    if models is not None:
        from worker.models import RegistryFile  # pulls in torch: only when asked for

        per_model = {m.name: m.drift for m in RegistryFile.from_toml(models).models if m.drift}
    return default, per_model


def verdicts(
    engine: Engine,
    *,
    model: str | None,
    since: datetime | None,
    window: Window,
    default: DriftThresholds,
    per_model: dict[str, DriftThresholds],
) -> list[Verdict]:
    refs = load_references(engine)
    windows = read_windows(engine, model=model, since=since)
    merged = merge_windows(windows, span_s=window.span_s, min_rows=window.rows)
    return [
        evaluate(w, _refs_of(refs, w.model, w.model_version), per_model.get(w.model, default))
        for w in merged
    ]


def references_of(engine: Engine, model: str, version: str) -> dict[str, Reference]:
    return _refs_of(load_references(engine), model, version)


def _refs_of(
    refs: dict[tuple[str, str, str], Reference], model: str, version: str
) -> dict[str, Reference]:
    return {s: r for (m, v, s), r in refs.items() if (m, v) == (model, version)}


def verdict_json(v: Verdict) -> dict[str, Any]:
    """One window in ``inferlane drift --json`` (shape documented in docs/DRIFT.md)."""
    w = v.window
    return {
        "model": w.model,
        "model_version": w.model_version,
        "start": w.start.isoformat(),
        "end": w.end.isoformat(),
        "rows": w.rows,
        "labelled": w.labelled,
        "error_rate": w.error_rate,
        "mean_abs_error": w.mean_abs_error,
        "metrics": {k: val for k, val in sorted(v.metrics.items()) if val is not None},
        "psi_level": v.psi_level,
        "flagged": v.flagged,
        "flags": [
            {"metric": c.metric, "value": c.value, "threshold": c.threshold} for c in v.crossings
        ],
    }
