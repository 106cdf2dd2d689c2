"""Sink: a record the broker refuses for good, or a row the database refuses, stays the
failure of its own request; the rest of the chunk is delivered and nothing is retried
forever. Real broker, real databases."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from e2e.support import read_topic
from pipeline_factories import record
from sqlalchemy import select

from consumers.contract import DeadLetterHeaders, InferenceResult, Latency, Priority, Status
from consumers.egress import Egress
from storage import ResultStore, result_counts
from storage.schema import consumer_offsets, inference_results
from storage.write_process import WriterProcess
from worker.base.pending import Labelled, Outcome
from worker.delivery.sink import RowWriter, Sink
from worker.intake.broker import EmbeddedBroker
from worker.settings import SinkConfig

RESULTS, DLQ = "inferlane.results", "inferlane.requests.dlq"


def outcome(
    rid: str,
    *,
    model: str = "m",
    drift: Labelled | None = None,
    reply_to: str | None = None,
    offset: int = 0,
) -> Outcome:
    result = InferenceResult(
        request_id=rid,
        model=model,
        status=Status.OK,
        outputs=1.5,
        priority=Priority.NORMAL,
        latency_ms=Latency(queue=0, compute=0, total=0),
    )
    rec = record({"request_id": rid}, key=rid.encode(), offset=offset)
    return Outcome(rec, result=result, drift=drift, reply_to=reply_to)


async def make_egress(bootstrap: str) -> Egress:
    egress = Egress(
        bootstrap=bootstrap,
        client_id="t",
        linger_ms=1,
        max_request_bytes=4 << 20,
        metadata_timeout_s=1.0,
        stable_topics=frozenset({RESULTS, DLQ}),
    )
    await egress.start()
    return egress


async def make_sink(
    bootstrap: str, store: RowWriter, urgent_egress: Egress | None = None
) -> tuple[Sink, Egress]:
    egress = await make_egress(bootstrap)
    sink = Sink(
        egress=egress,
        urgent_egress=urgent_egress,
        store=store,
        results_topic=RESULTS,
        dead_letter_topic=DLQ,
        group_id="g",
        max_value_bytes=1 << 20,
        config=SinkConfig(retry_backoff_s=0.05),
    )
    return sink, egress


@pytest.mark.parametrize("child", [False, True], ids=["writer-thread", "writer-process"])
async def test_a_row_the_database_refuses_is_dead_lettered_and_the_rest_commits(
    broker: EmbeddedBroker, db_url: str, child: bool
) -> None:
    # SQLite refuses the NaN drift row (stored as NULL, NOT NULL column); PostgreSQL
    # refuses the NUL character. Admission keeps both out; this is the safety net.
    good = [outcome(f"ok-{i}", drift=Labelled(1.0, 1.0, 0.0), offset=i) for i in range(7)]
    bad = outcome("bad", model="m\x00", drift=Labelled(float("nan"), 1.0, 0.0), offset=7)
    chunk = [*good[:3], bad, *good[3:]]
    with ResultStore(db_url) as store, WriterProcess(store, db_url) as process:
        sink, egress = await make_sink(broker.bootstrap, process if child else store)
        try:
            await asyncio.wait_for(sink.persist(chunk, {("inferlane.requests", 0): 8}), 60)
        finally:
            await egress.stop()
        with store.engine.connect() as conn:
            ids = set(conn.scalars(select(inference_results.c.request_id)))
            stored = conn.scalar(select(consumer_offsets.c.next_offset))
        assert ids == {o.result.request_id for o in good if o.result}
        assert result_counts(store.engine) == {"ok": 7}
        assert stored == 8  # the offsets still move past the refused record

    [letter] = await asyncio.to_thread(read_topic, broker.bootstrap, DLQ, 1)
    headers = dict(letter.headers)
    assert letter.key == b"bad" and letter.value == bad.record.value
    assert headers[DeadLetterHeaders.CODE] == b"store_refused"
    assert headers[DeadLetterHeaders.MESSAGE]  # the database's own reason


async def test_a_reply_to_the_broker_refuses_becomes_an_error_result_and_a_dead_letter(
    broker: EmbeddedBroker, tmp_path: object
) -> None:
    # An illegal topic name gets past no admission; here it stands for any topic the
    # broker refuses for good (unknown, forbidden): aiokafka calls it retriable.
    refused = outcome("to-nowhere", reply_to="not a topic!")
    fine = outcome("fine")
    with ResultStore(f"sqlite:///{tmp_path}/s.db") as store:
        sink, egress = await make_sink(broker.bootstrap, store)
        try:
            await asyncio.wait_for(sink.publish([refused, fine]), 30)
            await asyncio.wait_for(sink.persist([refused, fine], {}), 30)
        finally:
            await egress.stop()
        with store.engine.connect() as conn:
            rows = dict(
                conn.execute(
                    select(inference_results.c.request_id, inference_results.c.error_code)
                ).all()
            )
    assert rows == {"to-nowhere": "reply_to_refused", "fine": None}
    results = await asyncio.to_thread(read_topic, broker.bootstrap, RESULTS)
    by_id = {r.key: orjson.loads(r.value) for r in results}
    assert by_id[b"fine"]["status"] == "ok"
    assert by_id[b"to-nowhere"]["status"] == "error"
    assert "not a topic!" in by_id[b"to-nowhere"]["error"]["message"]
    [letter] = await asyncio.to_thread(read_topic, broker.bootstrap, DLQ, 1)
    assert dict(letter.headers)[DeadLetterHeaders.CODE] == b"reply_to_refused"


async def test_a_result_over_the_size_limit_keeps_its_id_and_status_on_kafka(
    broker: EmbeddedBroker, tmp_path: object
) -> None:
    big = outcome("big")
    assert big.result is not None
    big.result = big.result.model_copy(update={"metadata": {"pad": "x" * (2 << 20)}})
    with ResultStore(f"sqlite:///{tmp_path}/s.db") as store:
        sink, egress = await make_sink(broker.bootstrap, store)
        try:
            await asyncio.wait_for(sink.publish([big]), 30)
        finally:
            await egress.stop()
    [record_] = await asyncio.to_thread(read_topic, broker.bootstrap, RESULTS, 1)
    value = orjson.loads(record_.value)
    assert len(record_.value) < 4096
    assert value["request_id"] == "big" and value["status"] == "ok"
    assert value["error"]["code"] == "result_too_large" and value["metadata"] is None


async def test_urgent_outcomes_go_through_their_own_producer(
    broker: EmbeddedBroker, tmp_path: object
) -> None:
    # aiokafka keeps one produce request in flight per broker and producer: sharing the
    # bulk chunks' producer would queue a high result behind their acknowledgements.
    # With the bulk producer stopped, urgent outcomes still reach Kafka; bulk ones do not.
    with ResultStore(f"sqlite:///{tmp_path}/s.db") as store:
        urgent = await make_egress(broker.bootstrap)
        sink, bulk = await make_sink(broker.bootstrap, store, urgent)
        await bulk.stop()
        try:
            await asyncio.wait_for(sink.publish([outcome("high")], urgent=True), 30)
            stuck = asyncio.ensure_future(sink.publish([outcome("bulk")]))
            done, _ = await asyncio.wait([stuck], timeout=2)
            stuck.cancel()
        finally:
            await urgent.stop()
    assert not done  # the bulk path waits for its own (stopped) producer
    [result] = await asyncio.to_thread(read_topic, broker.bootstrap, RESULTS, 1)
    assert result.key == b"high"
