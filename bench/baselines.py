"""The baselines inferlane is compared with, run as subprocesses like the worker.

- ``naive``: what users write first. One aiokafka consumer; per message it decodes,
  runs one forward pass on the event loop, produces the result, waits for the broker's
  ack, and commits.
- ``threadpool``: the multi-threaded inference pattern common in blog posts. The
  consumer hands each message to a ``ThreadPoolExecutor(max_workers=cpu_count+1)``
  that decodes it and runs one request per forward pass; results are produced as
  they finish; offsets are auto-committed.

Both read the normal lane topic and write results in the wire contract's shape
(``latency_ms.total`` from receipt to result, ``metadata`` echoed), so the harness
reads them exactly as it reads inferlane's.

``python -m bench.baselines {naive,threadpool} --bootstrap H:P --model digits``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
import torch
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from consumers.contract import InferenceRequest
from worker.demo.models import ensure_demo_models
from worker.models import LoadedModel, ModelRegistry
from worker.settings import TopicConfig

TOPICS = TopicConfig()
_GROUP = "bench-baseline"


def _load(model: str) -> LoadedModel:
    registry = ModelRegistry.from_toml(ensure_demo_models())
    registry.warmup(model)
    return registry.get(model)


def _handle(model: LoadedModel, value: bytes, received_s: float) -> bytes:
    """Decode, validate, one forward pass, encode the result."""
    request = InferenceRequest.model_validate_json(value)
    started = time.monotonic()
    output = model.run([model.adapter.prepare(request.inputs)])[0]
    done = time.monotonic()
    result: dict[str, Any] = {
        "request_id": request.request_id,
        "model": request.model,
        "model_version": model.version,
        "status": "ok",
        "outputs": output,
        "priority": "normal",
        "batch_size": 1,
        "latency_ms": {
            "queue": (started - received_s) * 1000,
            "compute": (done - started) * 1000,
            "total": (done - received_s) * 1000,
        },
        "metadata": request.metadata,
    }
    return orjson.dumps(result)


def _clients(bootstrap: str, *, auto_commit: bool) -> tuple[AIOKafkaConsumer, AIOKafkaProducer]:
    consumer = AIOKafkaConsumer(
        TOPICS.normal,
        bootstrap_servers=bootstrap,
        group_id=_GROUP,
        enable_auto_commit=auto_commit,
        auto_offset_reset="earliest",
        # Tansu holds a first join for half the session timeout; the worker runs with 6 s too.
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
    )
    return consumer, AIOKafkaProducer(bootstrap_servers=bootstrap)


async def naive(bootstrap: str, model: LoadedModel, stop: asyncio.Event) -> None:
    consumer, producer = _clients(bootstrap, auto_commit=False)
    await consumer.start()
    await producer.start()
    try:
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=100, max_records=1)
            for messages in batches.values():
                for msg in messages:
                    assert msg.value is not None
                    value = _handle(model, msg.value, time.monotonic())
                    await producer.send_and_wait(TOPICS.results, value, key=msg.key)
                    await consumer.commit()
    finally:
        await consumer.stop()
        await producer.stop()


async def threadpool(bootstrap: str, model: LoadedModel, stop: asyncio.Event) -> None:
    workers = (os.cpu_count() or 1) + 1
    consumer, producer = _clients(bootstrap, auto_commit=True)
    slots = asyncio.Semaphore(4 * workers)  # bounded, so a backlog does not fill memory
    loop = asyncio.get_running_loop()
    await consumer.start()
    await producer.start()

    async def one(value: bytes, key: bytes | None) -> None:
        try:
            result = await loop.run_in_executor(pool, _handle, model, value, time.monotonic())
            await producer.send(TOPICS.results, result, key=key)
        finally:
            slots.release()

    tasks: set[asyncio.Task[None]] = set()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        try:
            while not stop.is_set():
                batches = await consumer.getmany(timeout_ms=100)
                for messages in batches.values():
                    for msg in messages:
                        assert msg.value is not None
                        await slots.acquire()
                        task = asyncio.create_task(one(msg.value, msg.key))
                        tasks.add(task)
                        task.add_done_callback(tasks.discard)
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            await consumer.stop()
            await producer.stop()


async def _main(kind: str, bootstrap: str, model: LoadedModel) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await (naive if kind == "naive" else threadpool)(bootstrap, model, stop)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.baselines")
    parser.add_argument("kind", choices=["naive", "threadpool"])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--torch-threads", type=int, default=None)
    args = parser.parse_args()
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    model = _load(args.model)
    asyncio.run(_main(args.kind, args.bootstrap, model))


if __name__ == "__main__":
    main()
