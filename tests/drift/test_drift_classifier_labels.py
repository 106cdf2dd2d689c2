"""Classifier drift rows: ``output`` the predicted class, ``expected`` the true one,
``error`` 1 when they differ and 0 when not, so the contract's anomaly query counts the
misclassified and a window's mean error is its error rate; a label the model cannot have
rejects its request as ``bad_label`` before it runs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
from e2e.support import settings_for, wait_for_rows
from sqlalchemy import text

from consumers.client import InferlaneClient
from consumers.contract import Priority, Status
from consumers.records import RawRecord, SourceRef
from storage import anomaly_count, make_engine
from storage.drift_windows import read_windows
from worker.demo.workload import digits_requests
from worker.facade import Worker
from worker.intake.admission import Admission, Admitted
from worker.intake.broker import EmbeddedBroker
from worker.models import Adapter, ClassifierAdapter, ModelRegistry, RegressorAdapter

ADAPTERS: dict[str, Adapter] = {
    "three": ClassifierAdapter(features=2, num_classes=3),
    "reg": RegressorAdapter(features=2),
}


def _admit(**request: Any) -> Admitted:
    value = orjson.dumps({"request_id": "r", "inputs": [1, 2], **request})
    record = RawRecord(SourceRef("inferlane.requests", 0, 0), b"r", value, 0.0, None)
    admission = Admission(
        adapter_for=ADAPTERS.__getitem__,
        lane_of_topic={"inferlane.requests": Priority.NORMAL},
        max_bytes=10_000,
        reply_to_allowed=lambda _: True,
    )
    return admission.admit([record])


@pytest.mark.parametrize(
    ("model", "expected", "says"),
    [
        ("three", 7, "class label 0..2, got 7"),
        ("three", -1, "class label 0..2"),
        ("three", 1.5, "class label 0..2"),
        ("three", "2", "class label 0..2"),
        ("reg", "12", "finite number"),
        ("reg", [1.0], "finite number"),
    ],
)
def test_a_label_the_model_cannot_have_rejects_the_request(
    model: str, expected: object, says: str
) -> None:
    admitted = _admit(model=model, expected=expected)
    (outcome,) = admitted.ended
    assert outcome.dead_letter is not None and outcome.dead_letter.code == "bad_label"
    assert outcome.result is not None and outcome.result.status is Status.REJECTED
    assert outcome.result.error is not None and outcome.result.error.code == "bad_label"
    assert says in outcome.result.error.message


@pytest.mark.parametrize(("model", "expected"), [("three", 2), ("three", 0), ("reg", 1e6)])
def test_a_label_the_model_can_have_is_admitted(model: str, expected: object) -> None:
    assert len(_admit(model=model, expected=expected).pending) == 1


async def test_classifier_drift_rows_count_misclassifications(
    broker: EmbeddedBroker, tmp_path: Path, demo_registry: ModelRegistry
) -> None:
    db = f"sqlite:///{tmp_path / 'drift.db'}"
    # Inverted digits (white on black) are mostly misclassified: both kinds of rows.
    requests = digits_requests(100) + digits_requests(100, prefix="inv", inverted=True)
    bad = [
        b'{"request_id": "label-10", "model": "digits", "inputs": %s, "expected": 10}',
        b'{"request_id": "label-str", "model": "digits", "inputs": %s, "expected": "7"}',
    ]
    inputs = orjson.dumps(requests[0].inputs)
    engine = make_engine(db)
    try:
        async with Worker(settings_for(broker.bootstrap, db), demo_registry):
            with InferlaneClient(broker.bootstrap) as client:
                await asyncio.to_thread(client.publish, requests)
                for value in bad:
                    client.send_raw(value % inputs, key=value.split(b'"')[3])
                client.flush()
            assert await asyncio.to_thread(wait_for_rows, engine, 202) == 202
        with engine.connect() as conn:
            errors: dict[float, int] = dict(
                conn.execute(text("SELECT error, COUNT(*) FROM inference_log GROUP BY error")).all()
            )
            wrong = conn.execute(
                text("SELECT COUNT(*) FROM inference_log WHERE output <> expected")
            ).scalar_one()
            rejected = conn.execute(
                text(
                    "SELECT request_id, status, error_code FROM inference_results "
                    "WHERE request_id LIKE 'label-%' ORDER BY request_id"
                )
            ).all()
            logged_bad = conn.execute(
                text("SELECT COUNT(*) FROM inference_log WHERE request_id LIKE 'label-%'")
            ).scalar_one()
        windows = read_windows(engine, model="digits")
        anomalies = anomaly_count(engine, 0.5, model="digits")
    finally:
        engine.dispose()
    assert set(errors) == {0.0, 1.0} and sum(errors.values()) == 200
    assert errors[1.0] == wrong > 0
    assert anomalies == wrong
    assert [tuple(r) for r in rejected] == [
        ("label-10", "rejected", "bad_label"),
        ("label-str", "rejected", "bad_label"),
    ]
    assert logged_bad == 0
    # Labelled-error windows: a mean error of a classifier is its error rate.
    assert sum(w.labelled for w in windows) == 200
    assert sum(w.wrong for w in windows) == wrong
    assert sum(w.abs_error_sum for w in windows) == pytest.approx(wrong)
