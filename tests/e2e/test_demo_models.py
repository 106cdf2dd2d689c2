"""Each demo model end to end: Kafka in, Kafka results and SQL out, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import math

from consumers.client import InferlaneClient
from consumers.contract import Status
from storage import anomaly_count, drift_summary, make_engine
from worker.demo.workload import diabetes_requests, digits_requests, minilm_requests
from worker.facade import Worker
from worker.intake.broker import EmbeddedBroker
from worker.models import ModelRegistry

from .support import settings_for, wait_for_rows


async def test_demo_models_end_to_end(
    broker: EmbeddedBroker, db_url: str, demo_registry: ModelRegistry
) -> None:
    digits, diabetes, minilm = digits_requests(300), diabetes_requests(60), minilm_requests(24)
    requests = digits + diabetes + minilm
    settings = settings_for(broker.bootstrap, db_url)
    async with Worker(settings, demo_registry):
        with InferlaneClient(broker.bootstrap) as client:
            await asyncio.to_thread(client.watch_results)
            ids = await asyncio.to_thread(client.publish, requests)
            results = await asyncio.to_thread(client.results, ids, timeout_s=120)

    assert {r.status for r in results.values()} == {Status.OK}
    misclassified = 0
    for request in digits:
        out = results[request.request_id].outputs
        assert isinstance(out, dict) and 0 <= out["label"] <= 9
        assert math.isclose(sum(out["probs"]), 1.0, rel_tol=1e-4)
        misclassified += out["label"] != request.expected
    for request in diabetes:
        assert isinstance(results[request.request_id].outputs, float)
    for request in minilm:
        vector = results[request.request_id].outputs
        assert isinstance(vector, list) and len(vector) == 384
        assert math.isclose(math.sqrt(sum(v * v for v in vector)), 1.0, rel_tol=1e-3)
    assert all(r.model_version and r.batch_size >= 1 for r in results.values())

    engine = make_engine(db_url)
    try:
        assert wait_for_rows(engine, len(requests)) == len(requests)
        # The contract's anomaly query counts exactly the misclassified digits.
        assert anomaly_count(engine, 0.5, model="digits") == misclassified
        checked = drift_summary(engine)
        assert checked["digits"].rows == len(digits)
        assert checked["digits"].anomalies == misclassified
        assert checked["diabetes"].rows == len(diabetes)
        assert "minilm" not in checked  # no expected values, no drift rows
        assert misclassified / len(digits) < 0.1
    finally:
        engine.dispose()
