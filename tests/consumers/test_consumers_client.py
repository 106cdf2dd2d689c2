"""The users' client on the real broker: results awaited before their topic exists."""

from __future__ import annotations

import asyncio

from consumers.client import DEFAULT_RESULTS, InferlaneClient
from consumers.contract import InferenceResult, Latency, Priority, Status
from consumers.topics import ensure_topics
from worker.intake.broker import EmbeddedBroker


def _result(request_id: str) -> bytes:
    latency = Latency(queue=0.0, compute=0.0, total=0.0)
    result = InferenceResult(
        request_id=request_id,
        model="digits",
        status=Status.OK,
        outputs={"label": 3},
        priority=Priority.NORMAL,
        latency_ms=latency,
    )
    return result.model_dump_json().encode()


def test_results_arrive_when_the_topic_is_created_after_watching(broker: EmbeddedBroker) -> None:
    """A worker that is still starting creates the results topic after the user's client
    started watching: the client must still see the results written there."""
    with InferlaneClient(broker.bootstrap) as client:
        client.watch_results()  # no results topic yet
        asyncio.run(ensure_topics(broker.bootstrap, [DEFAULT_RESULTS], partitions=3))
        for i in range(3):
            client.send_raw(_result(f"r{i}"), key=f"r{i}".encode(), topic=DEFAULT_RESULTS)
        client.flush()
        found = client.results(["r0", "r1", "r2"], timeout_s=30)
    assert {r: found[r].outputs for r in found} == {f"r{i}": {"label": 3} for i in range(3)}
