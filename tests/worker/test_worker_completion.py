"""CompletionQueue: the urgent stream (high lane) and the bulk stream are taken apart."""

from __future__ import annotations

import asyncio

from pipeline_factories import record

from consumers.contract import InferenceResult, Latency, Priority, Status
from worker.base.pending import Outcome
from worker.delivery.completion import BULK, URGENT, CompletionQueue


def done(rid: str, lane: Priority) -> Outcome:
    result = InferenceResult(
        request_id=rid,
        model="m",
        status=Status.OK,
        priority=lane,
        latency_ms=Latency(queue=0, compute=0, total=0),
    )
    return Outcome(record(), result=result)


def ids(chunk: list[Outcome]) -> list[str]:
    return [o.result.request_id for o in chunk if o.result]


async def test_bulk_takes_normal_before_low_and_never_high() -> None:
    q = CompletionQueue()
    q.put([done("l1", Priority.LOW), done("h1", Priority.HIGH), done("n1", Priority.NORMAL)])
    assert ids(await q.take(10, BULK)) == ["n1", "l1"]
    assert ids(await q.take(10, URGENT)) == ["h1"]
    assert len(q) == 0


async def test_an_urgent_taker_is_woken_by_a_high_result_while_bulk_waits() -> None:
    q = CompletionQueue()
    urgent = asyncio.create_task(q.take(10, URGENT))
    bulk = asyncio.create_task(q.take(10, BULK))
    await asyncio.sleep(0)
    q.put([done("h1", Priority.HIGH)])
    assert ids(await asyncio.wait_for(urgent, 1)) == ["h1"]
    assert not bulk.done()
    q.put([done("n1", Priority.NORMAL)])
    assert ids(await asyncio.wait_for(bulk, 1)) == ["n1"]


async def test_a_dead_letter_without_a_result_goes_with_bulk() -> None:
    q = CompletionQueue()
    q.put([Outcome(record())])
    assert len(await q.take(10, BULK)) == 1
