"""``inferlane publish-demo`` (the compose stack's one-shot publisher)."""

from __future__ import annotations

import orjson
from e2e.support import read_topic
from typer.testing import CliRunner

from consumers.topics import ensure_topics
from worker.cli import app
from worker.demo.run import BAD_RECORDS
from worker.intake.broker import EmbeddedBroker
from worker.settings import TopicConfig


async def test_publish_demo_spreads_the_workload_over_the_lanes(broker: EmbeddedBroker) -> None:
    topics = TopicConfig()
    lanes = list(topics.lane_topics())
    await ensure_topics(broker.bootstrap, lanes, partitions=1)
    done = CliRunner().invoke(
        app,
        ["publish-demo", "-b", broker.bootstrap, "--digits", "40", "--diabetes", "20",
         "--minilm", "10"],
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    assert f"published {70 + len(BAD_RECORDS)} demo records" in done.output
    by_lane = {t: read_topic(broker.bootstrap, t) for t in lanes}
    assert sum(len(r) for r in by_lane.values()) == 70 + len(BAD_RECORDS)
    assert all(by_lane.values())  # every lane gets some
    models = {
        orjson.loads(r.value)["model"]
        for records in by_lane.values()
        for r in records
        if r.key not in {k for k, _ in BAD_RECORDS}
    }
    assert models == {"digits", "diabetes", "minilm"}
