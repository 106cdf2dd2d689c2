"""The Kafka side of output: results and dead letters, produced per chunk, awaited once."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.producer.message_accumulator import BatchBuilder

from consumers.security import KafkaSecurity

# How long a topic that could not be resolved stays refused before it is asked for again.
UNWRITABLE_TTL_S = 60.0
# Topics whose partitions (and producer metadata) are kept between calls. ``reply_to``
# is the producer's choice: past this many, the least recently used are forgotten,
# and looked up again if named again, so that no one grows them without bound.
MAX_KNOWN_TOPICS = 256


@dataclass(frozen=True, slots=True)
class OutRecord:
    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] | None = None


@dataclass(frozen=True, slots=True)
class Refused:
    """A record the broker refused for good: a retry would fail the same way."""

    record: OutRecord
    reason: str


class Egress:
    """Builds one record batch per partition instead of one ``send`` per record: the
    per-record path of aiokafka costs about 3x more in Python, and this runs for
    every result. Keys map to partitions with Kafka's default (murmur2) partitioner,
    as any Kafka client would place them."""

    def __init__(
        self,
        *,
        bootstrap: str,
        client_id: str,
        linger_ms: int,
        max_request_bytes: int,
        metadata_timeout_s: float = 10.0,
        stable_topics: frozenset[str] = frozenset(),
        security: KafkaSecurity | None = None,
    ) -> None:
        # No idempotence nor transactions: the embedded broker supports neither, and
        # results are at-least-once by contract (keyed by request id).
        self._producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            client_id=client_id,
            acks="all",
            linger_ms=linger_ms,
            max_request_size=max_request_bytes,
            max_batch_size=1_048_576,
            **(security or KafkaSecurity()).aiokafka_kwargs(),
        )
        self._partitioner = DefaultPartitioner()
        self._partitions: OrderedDict[str, list[int]] = OrderedDict()  # least recent first
        self._publishing = 0  # publish() calls under way
        self._metadata_timeout_s = metadata_timeout_s
        # Topics the worker created itself: failing to resolve them is an outage, not a
        # refusal, so it is raised (and retried) rather than reported.
        self._stable = stable_topics
        # topic -> (until, reason), least recent first
        self._unwritable: OrderedDict[str, tuple[float, str]] = OrderedDict()

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        await self._producer.stop()

    async def publish(self, records: list[OutRecord], *, at_once: bool = False) -> list[Refused]:
        """Send all and wait until each is acknowledged or refused for good;
        ``at_once``: without the producer's ``linger_ms`` (streamed chunks).

        Returns the refused ones; raises on a transient failure (the caller retries
        the whole call: results are at-least-once).
        """
        self._publishing += 1
        try:
            return await self._publish(records, at_once)
        finally:
            self._publishing -= 1
            if not self._publishing:  # nothing in flight: the metadata may shrink
                self._forget_topics()

    async def _publish(self, records: list[OutRecord], at_once: bool) -> list[Refused]:
        refused: list[Refused] = []
        open_batches: dict[tuple[str, int], tuple[BatchBuilder, list[OutRecord]]] = {}
        sent: list[tuple[asyncio.Future[object], list[OutRecord]]] = []
        for r in records:
            partition = await self._partition(r.topic, r.key)
            if isinstance(partition, Refused):
                refused.append(Refused(r, partition.reason))
                continue
            dest = (r.topic, partition)
            batch, members = open_batches.get(dest) or (self._producer.create_batch(), [])
            if batch.append(key=r.key, value=r.value, timestamp=None, headers=r.headers) is None:
                sent.append((await self._send(batch, dest, at_once), members))
                batch, members = self._producer.create_batch(), []
                batch.append(key=r.key, value=r.value, timestamp=None, headers=r.headers)
            members.append(r)
            open_batches[dest] = (batch, members)
        for dest, (batch, members) in open_batches.items():
            sent.append((await self._send(batch, dest, at_once), members))
        outcomes = await asyncio.gather(*(f for f, _ in sent), return_exceptions=True)
        alone: list[OutRecord] = []
        for (_, members), outcome in zip(sent, outcomes, strict=True):
            if not isinstance(outcome, BaseException):
                continue
            if _transient(outcome):
                raise outcome
            if len(members) == 1:
                refused.append(Refused(members[0], _describe(outcome)))
            else:  # find which of them the broker refuses: send each on its own
                alone.extend(members)
        for r in alone:
            refused.extend(await self._publish([r], at_once))
        return refused

    async def _send(
        self, batch: BatchBuilder, dest: tuple[str, int], at_once: bool
    ) -> asyncio.Future[object]:
        topic, partition = dest
        if at_once:  # aiokafka sends a closed batch without lingering (as a full one)
            batch.close()
        return await self._producer.send_batch(batch, topic, partition=partition)

    async def _partition(self, topic: str, key: bytes | None) -> int | Refused:
        partitions = self._partitions.get(topic)
        if partitions is None:
            known = await self._resolve(topic)
            if isinstance(known, Refused):
                return known
            partitions = self._partitions[topic] = sorted(known)
        else:
            self._partitions.move_to_end(topic)
        return int(self._partitioner(key, partitions, partitions))

    def _forget_topics(self) -> None:
        """Keep the newest ``MAX_KNOWN_TOPICS`` topics, and the producer's metadata to
        them. Called with nothing in flight: no batch waits on a topic dropped here."""
        now = time.monotonic()
        for topic in [t for t, (until, _) in self._unwritable.items() if until <= now]:
            del self._unwritable[topic]
        while len(self._unwritable) > MAX_KNOWN_TOPICS:
            self._unwritable.popitem(last=False)
        if len(self._partitions) <= MAX_KNOWN_TOPICS:
            return
        while len(self._partitions) > MAX_KNOWN_TOPICS:
            self._partitions.popitem(last=False)
        keep = self._stable | self._partitions.keys()
        self._producer.client.set_topics(sorted(keep))  # no metadata request: a subset

    async def _resolve(self, topic: str) -> set[int] | Refused:
        """The topic's partitions; a topic that cannot be resolved in time is refused for
        a while (aiokafka would wait 40 s per record for an illegal or forbidden one)."""
        now = time.monotonic()
        until, reason = self._unwritable.get(topic, (0.0, ""))
        if until > now:
            return Refused(OutRecord(topic, None, None), reason)
        try:
            return set(
                await asyncio.wait_for(
                    self._producer.partitions_for(topic), self._metadata_timeout_s
                )
            )
        except (TimeoutError, KafkaError) as exc:
            if topic in self._stable:
                raise
            reason = f"topic {topic!r} is unknown or not writable: {_describe(exc)}"
            self._unwritable[topic] = (now + UNWRITABLE_TTL_S, reason)
            self._unwritable.move_to_end(topic)
            return Refused(OutRecord(topic, None, None), reason)


def _transient(exc: BaseException) -> bool:
    # aiokafka marks its errors; anything else (a timeout, a dropped connection) is
    # treated as transient so that nothing is refused for a passing fault.
    return not isinstance(exc, KafkaError) or bool(exc.retriable)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
