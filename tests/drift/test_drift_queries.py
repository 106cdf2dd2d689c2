"""Anomaly queries, views, the CLI's JSON, and retention: SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from storage import DriftRow, ResultRow, ResultStore
from storage.anomalies import find_anomalies
from storage.drift_windows import read_windows
from storage.latency import lane_latencies
from storage.retention import purge
from tests.drift.drift_factories import stream, tracker
from worker.cli import app

NOW = datetime.now(UTC)
CONTRACT = "SELECT COUNT(*) FROM inference_log WHERE ABS(output - expected) > 0.5"


def _row(rid: str, output: float, expected: float, age_s: float, model: str = "reg") -> DriftRow:
    at = NOW - timedelta(seconds=age_s)
    return DriftRow(rid, model, "1", output, expected, output - expected, at)


@pytest.fixture
def store(db_url: str) -> Iterator[ResultStore]:
    with ResultStore(db_url) as store:
        store.write(
            [],
            [
                _row("old-bad", 9.0, 1.0, 86_400 * 40),
                _row("old-ok", 1.0, 1.0, 86_400 * 40),
                _row("bad", 5.0, 1.0, 60),
                _row("worse", 1.0, 9.0, 120, model="cls"),
                _row("near", 1.4, 1.0, 30),
            ],
            [],
        )
        yield store


def test_anomalies_since_by_model_and_worst_first(store: ResultStore) -> None:
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql(CONTRACT).scalar_one() == 3
    found = find_anomalies(store.engine, since=NOW - timedelta(days=1))
    assert found.count == 2
    assert [r.request_id for r in found.worst] == ["worse", "bad"]
    assert find_anomalies(store.engine, model="reg").count == 2
    assert find_anomalies(store.engine, threshold=0.3, limit=1).worst[0].request_id == "old-bad"


def test_views_answer_on_both_databases(store: ResultStore) -> None:
    t = tracker(store.engine)
    for at, obs in stream(seed=1, windows=2, per_window=600, shift_at=1):
        t.record(obs, at)
    t.flush(final=True)
    with store.engine.connect() as conn:
        errors = conn.execute(
            text("SELECT rows, error_rate FROM drift_window_errors ORDER BY window_start")
        ).all()
        top = conn.execute(
            text("SELECT request_id FROM top_anomalies ORDER BY abs_error DESC")
        ).scalars()
        flagged = conn.execute(text("SELECT DISTINCT window_start FROM drift_flagged_windows"))
        assert [r for r, _ in errors] == [600, 600]
        assert errors[1][1] > errors[0][1]
        assert list(top) == ["old-bad", "worse", "bad"]
        assert len(flagged.all()) == 1


def test_purge_deletes_only_old_rows(store: ResultStore) -> None:
    t = tracker(store.engine)
    for at, obs in stream(seed=1, windows=2, per_window=100, shift_at=None):
        t.record(obs, at)  # windows dated 2026-01-01
    t.flush(final=True)
    purged = purge(store.engine, NOW - timedelta(days=30), batch_rows=1)
    assert purged.rows["inference_log"] == 2
    assert find_anomalies(store.engine).count == 2
    assert read_windows(store.engine) == []  # dated 2026-01-01


def _cli(*args: str) -> object:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return orjson.loads(result.output)


def test_cli_json_shapes_are_stable(store: ResultStore, db_url: str, tmp_path: Path) -> None:
    t = tracker(store.engine)
    for at, obs in stream(seed=1, windows=3, per_window=400, shift_at=2):
        t.record(obs, at)
    t.flush(final=True)

    anomalies = _cli("anomalies", "--database", db_url, "--json", "--limit", "1")
    assert anomalies == {
        "threshold": 0.5,
        "count": 3,
        "worst": [
            {
                "request_id": "old-bad",
                "model": "reg",
                "model_version": "1",
                "output": 9.0,
                "expected": 1.0,
                "abs_error": 8.0,
                "created_at": anomalies["worst"][0]["created_at"],  # type: ignore[index]
            }
        ],
    }
    drift = _cli("drift", "--database", db_url, "--json", "--since", "3650d")
    windows = drift["windows"]  # type: ignore[index]
    assert set(windows[0]) == {
        "model", "model_version", "start", "end", "rows", "labelled", "error_rate",
        "mean_abs_error", "metrics", "psi_level", "flagged", "flags",
    }  # fmt: skip
    assert [w["flagged"] for w in windows] == [False, False, True]
    assert {f["metric"] for f in windows[2]["flags"]} >= {"output_psi", "input_psi"}
    assert set(windows[2]["flags"][0]) == {"metric", "value", "threshold"}
    joined = _cli("drift", "--database", db_url, "--json", "--since", "3650d", "--window", "800")
    assert [w["rows"] for w in joined["windows"]] == [800, 400]  # type: ignore[index]

    out = tmp_path / "report.png"
    result = CliRunner().invoke(app, ["report", "--database", db_url, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "1 flagged" in result.output


def test_lane_latencies_are_the_newest_ok_results_oldest_first(store: ResultStore) -> None:
    def result(rid: str, lane: str, ms: float, age_s: float, status: str = "ok") -> ResultRow:
        return ResultRow(
            rid, "digits", "1", status, lane, None, None, None, 0.0, 0.0, ms, None, 1,
            "t", 0, 0, NOW - timedelta(seconds=age_s),
        )  # fmt: skip

    store.write(
        [
            result("a", "high", 5.0, 30),
            result("b", "low", 50.0, 20),
            result("c", "normal", 9.0, 10, status="error"),
            result("d", "normal", 7.0, 5),
        ],
        [],
        [],
    )
    samples = lane_latencies(store.engine, "digits", limit=2)
    assert [(s.lane, s.total_ms) for s in samples] == [("low", 50.0), ("normal", 7.0)]
    assert (
        lane_latencies(store.engine, "digits", since=NOW - timedelta(seconds=25))[0].lane == "low"
    )
