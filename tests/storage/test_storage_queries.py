"""Read helpers, and the anomaly query from the SQL contract as users type it."""

from __future__ import annotations

import pytest
from storage_rows import drift, result

from storage import (
    ResultStore,
    anomaly_count,
    count_results,
    drift_summary,
    result_counts,
)

DESIGN_QUERY = "SELECT COUNT(*) FROM inference_log WHERE ABS(output - expected) > 0.5"


def _write_drift(store: ResultStore) -> None:
    store.write(
        [],
        [
            drift("a", 1.0, 1.0),
            drift("b", 1.4, 1.0),
            drift("c", 2.0, 1.0),  # anomaly
            drift("d", 0.0, 0.75),  # anomaly, below expected
            drift("e", 3.0, 3.0, model="cls"),
            drift("f", 0.0, 9.0, model="cls"),  # anomaly
        ],
        [],
    )


def test_the_design_query_runs_verbatim(store: ResultStore) -> None:
    _write_drift(store)
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql(DESIGN_QUERY).scalar_one() == 3


def test_anomaly_count(store: ResultStore) -> None:
    _write_drift(store)

    assert anomaly_count(store.engine) == 3
    assert anomaly_count(store.engine, threshold=0.8) == 2
    assert anomaly_count(store.engine, model="reg") == 2
    assert anomaly_count(store.engine, threshold=100.0) == 0


def test_drift_summary_per_model(store: ResultStore) -> None:
    _write_drift(store)
    summary = drift_summary(store.engine, threshold=0.5)
    assert set(summary) == {"reg", "cls"}
    assert (summary["reg"].rows, summary["reg"].anomalies) == (4, 2)
    assert summary["reg"].mean_abs_error == pytest.approx((0 + 0.4 + 1.0 + 0.75) / 4)
    assert (summary["cls"].rows, summary["cls"].anomalies) == (2, 1)
    assert summary["cls"].mean_abs_error == pytest.approx(4.5)


def test_result_counts(store: ResultStore) -> None:
    assert result_counts(store.engine) == {}
    store.write(
        [result("a"), result("b"), result("c", status="error"), result("d", status="expired")],
        [],
        [],
    )

    assert result_counts(store.engine) == {"ok": 2, "error": 1, "expired": 1}
    assert count_results(store.engine) == 4
