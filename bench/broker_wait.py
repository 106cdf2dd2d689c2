"""``python -m bench.broker_wait``: what a consumer's ``fetch_max_wait_ms`` costs in
latency on the embedded broker (Tansu), by partitions per topic.

Per (partitions, wait): one consumer reads a fresh topic from its end; a record is
produced at a random moment (so a fetch is in progress when it lands) and the time from
its send to the consumer's read is taken, ``--records`` times. On Apache Kafka a fetch
returns once data arrives, whatever the wait; Tansu looks for data when the fetch comes
and again after sleeping half the time left, and so on, so a record waits for the next
look.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from rich.console import Console
from rich.progress import track
from rich.table import Table

from consumers.topics import ensure_topics
from worker.intake.broker import EmbeddedBroker

PARTITIONS = (1, 3)
WAITS_MS = (5, 50, 250)


async def latencies_ms(bootstrap: str, topic: str, wait_ms: int, records: int) -> list[float]:
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, fetch_max_wait_ms=wait_ms, auto_offset_reset="latest"
    )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    arrivals: asyncio.Queue[float] = asyncio.Queue()

    async def read() -> None:
        # getmany hands a drained fetch back at once, so the consumer's next fetch is
        # already waiting in the broker when a record lands. (getone keeps it until the
        # next call, which then sends a fetch that finds the record there already.)
        while True:
            batches = await consumer.getmany(timeout_ms=1000)
            for _ in range(sum(map(len, batches.values()))):
                arrivals.put_nowait(time.monotonic())

    await consumer.start()
    await producer.start()
    reader = asyncio.create_task(read())
    try:
        await asyncio.sleep(1.0)  # assigned and fetching before the first record
        out = []
        for i in range(records):
            await asyncio.sleep(random.uniform(0.05, 0.6))
            sent = time.monotonic()
            # A key per record spreads them over the partitions.
            await producer.send_and_wait(topic, b"x", key=str(i).encode())
            out.append(1000 * (await arrivals.get() - sent))
        return out
    finally:
        reader.cancel()
        await producer.stop()
        await consumer.stop()


async def run(records: int) -> list[tuple[int, int, list[float]]]:
    cases = [(p, w) for p in PARTITIONS for w in WAITS_MS]
    out = []
    with EmbeddedBroker() as broker:
        for partitions, wait_ms in track(cases, description="fetch waits"):
            topic = f"wait-{partitions}-{wait_ms}"
            await ensure_topics(broker.bootstrap, [topic], partitions=partitions)
            found = await latencies_ms(broker.bootstrap, topic, wait_ms, records)
            out.append((partitions, wait_ms, found))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=20, help="records per case")
    args = parser.parse_args(argv)
    table = Table("partitions", "fetch_max_wait_ms", "median ms", "max ms")
    for partitions, wait_ms, found in asyncio.run(run(args.records)):
        median = statistics.median(found)
        table.add_row(str(partitions), str(wait_ms), f"{median:.1f}", f"{max(found):.1f}")
    Console().print(table)


if __name__ == "__main__":
    main()
