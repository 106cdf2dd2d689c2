"""``inferlane publish-demo``: the demo's labelled, mixed workload onto a running cluster."""

from __future__ import annotations

from consumers.client import InferlaneClient
from worker.demo.run import BAD_RECORDS
from worker.demo.workload import (
    diabetes_requests,
    digits_requests,
    minilm_requests,
    spread_over_lanes,
)
from worker.settings import TopicConfig


def publish_demo(bootstrap: str, *, digits: int, diabetes: int, minilm: int) -> int:
    """Publish the workload over the lane topics, plus the demo's bad records; return
    how many records were sent."""
    topics = TopicConfig()
    requests = digits_requests(digits) + diabetes_requests(diabetes) + minilm_requests(minilm)
    items = spread_over_lanes(requests, topics)
    with InferlaneClient(bootstrap) as client:
        for item in items:
            client.send_raw(item.value, key=item.key, topic=item.topic)
        for key, value in BAD_RECORDS:
            client.send_raw(value, key=key, topic=topics.normal)
        client.flush()
    return len(items) + len(BAD_RECORDS)
