"""A small publishing client for users: send requests, await their results.

Built on kafka-python (blocking, no event loop needed). Results are read by
assigning the results topic's partitions directly, from the end of the topic as it
stood before publishing, so no consumer group join is needed.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any

import orjson
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.consumer.fetcher import ConsumerRecord

from consumers.contract import InferenceRequest, InferenceResult, StreamChunk
from consumers.security import KafkaSecurity

DEFAULT_TOPIC = "inferlane.requests"
DEFAULT_RESULTS = "inferlane.results"

# kafka-python 2.x asks for fetches of up to 50 MB yet refuses frames over 1 MB, so a
# busy results topic breaks its reads ("Invalid frame length"); keep the two in step.
# Requests whose results (or chunks) the client keeps once read, until asked for.
KEEP_READ = 100_000

READER_CONFIG = {"fetch_max_bytes": 8 * 2**20, "receive_message_max_bytes": 16 * 2**20}


class InferlaneClient:
    def __init__(
        self,
        bootstrap: str,
        *,
        results_topic: str = DEFAULT_RESULTS,
        security: KafkaSecurity | None = None,
        api_version: tuple[int, ...] | None = None,
    ) -> None:
        """``api_version`` (say ``(3, 7)``) skips kafka-python's probe of the broker."""
        self._bootstrap = bootstrap
        self._results_topic = results_topic
        # Every client this object builds connects the same way.
        self._connection: dict[str, object] = {
            **(security or KafkaSecurity()).kafka_python_kwargs(),
            "api_version": api_version,
        }
        self._producer = KafkaProducer(
            bootstrap_servers=bootstrap, linger_ms=5, acks="all", **self._connection
        )
        self._consumer: KafkaConsumer | None = None
        self._results_pending = False  # watching a results topic that did not exist yet
        # Read and not yet asked for (the newest KEEP_READ requests' only, oldest dropped).
        self._seen: OrderedDict[str, InferenceResult] = OrderedDict()  # first result per id
        self._chunks: OrderedDict[str, dict[int, StreamChunk]] = OrderedDict()

    def watch_results(self) -> None:
        """Start reading results from now on; call before publishing what you await."""
        consumer = KafkaConsumer(
            bootstrap_servers=self._bootstrap,
            enable_auto_commit=False,
            **READER_CONFIG,
            **self._connection,
        )
        self._consumer = consumer
        if not self._assign_results(from_start=False):
            # Created after this call (a worker that is still starting makes it):
            # everything it will hold is new, so it is read from its start.
            self._results_pending = True

    def _assign_results(self, *, from_start: bool) -> bool:
        """Assign every partition of the results topic; False if it does not exist yet."""
        assert self._consumer is not None
        partitions = self._consumer.partitions_for_topic(self._results_topic)
        if not partitions:
            return False
        tps = [TopicPartition(self._results_topic, p) for p in sorted(partitions)]
        self._consumer.assign(tps)
        if from_start:
            self._consumer.seek_to_beginning(*tps)
        else:
            skip_to_end(self._consumer, tps)
        self._results_pending = False
        return True

    def send_raw(
        self, value: bytes, *, key: bytes | None = None, topic: str = DEFAULT_TOPIC
    ) -> None:
        self._producer.send(topic, key=key, value=value)

    def publish(
        self,
        requests: Iterable[InferenceRequest | Mapping[str, Any]],
        *,
        topic: str = DEFAULT_TOPIC,
    ) -> list[str]:
        """Validate and send each request, keyed by its id; return the ids in order."""
        ids = []
        for item in requests:
            request = (
                item
                if isinstance(item, InferenceRequest)
                else InferenceRequest.model_validate(item)
            )
            value = request.model_dump_json(exclude_none=True).encode()
            self.send_raw(value, key=request.request_id.encode(), topic=topic)
            ids.append(request.request_id)
        self._producer.flush()
        return ids

    def flush(self) -> None:
        self._producer.flush()

    def results(self, ids: Iterable[str], *, timeout_s: float = 60.0) -> dict[str, InferenceResult]:
        """Results for ``ids`` (first one seen per id); raises TimeoutError with what is
        missing if they do not all arrive in time."""
        wanted = set(ids)
        deadline = time.monotonic() + timeout_s
        while wanted - self._seen.keys():
            if not self._read(deadline):
                missing = len(wanted - self._seen.keys())
                raise TimeoutError(f"{missing} of {len(wanted)} results did not arrive")
        return {i: self._seen[i] for i in wanted}

    def stream(
        self, request_id: str, *, timeout_s: float = 60.0
    ) -> Iterator[StreamChunk | InferenceResult]:
        """A generative request's chunks as they arrive, in ``seq`` order and each once
        (a replay sends them again), then its result; raises TimeoutError if the result
        does not arrive in time."""
        deadline = time.monotonic() + timeout_s
        seq = 0
        while True:
            chunks = self._chunks.get(request_id, {})
            while seq in chunks:
                yield chunks.pop(seq)
                seq += 1
            result = self._seen.get(request_id)
            if result is not None:
                self._chunks.pop(request_id, None)
                yield result
                return
            if not self._read(deadline):
                raise TimeoutError(f"the result of {request_id!r} did not arrive")

    def _read(self, deadline: float) -> bool:
        """One poll of the results topic into ``_seen`` and ``_chunks``; False once
        ``deadline`` (monotonic) has passed."""
        if self._consumer is None:
            raise RuntimeError("call watch_results() before publishing")
        left_ms = int((deadline - time.monotonic()) * 1000)
        if left_ms <= 0:
            return False
        if self._results_pending and not self._assign_results(from_start=True):
            time.sleep(min(left_ms, 200) / 1000)
            return True
        for messages in self._consumer.poll(timeout_ms=min(left_ms, 500)).values():
            for m in messages:
                value = orjson.loads(m.value)
                if isinstance(value, dict) and value.get("kind") == "chunk":
                    chunk = StreamChunk.model_validate(value)
                    self._chunks.setdefault(chunk.request_id, {})[chunk.seq] = chunk
                    _bound(self._chunks)
                    continue
                result = InferenceResult.model_validate(value)
                self._seen.setdefault(result.request_id, result)
                _bound(self._seen)
        return True

    def close(self) -> None:
        self._producer.close()
        if self._consumer is not None:
            self._consumer.close()

    def __enter__(self) -> InferlaneClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _bound(read: OrderedDict[str, Any]) -> None:
    while len(read) > KEEP_READ:
        read.popitem(last=False)


def read_to_end(
    consumer: KafkaConsumer, tps: Sequence[TopicPartition], *, timeout_s: float = 30.0
) -> list[ConsumerRecord]:
    """Every record from the consumer's positions to the end of ``tps``.

    The end is the high watermark that each fetch response reports, not
    ``end_offsets()``: the embedded broker (Tansu) answers ListOffsets with a count of
    record batches, so reading "up to the end offsets" stops early there.
    """
    records: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout_s
    while True:
        for batch in consumer.poll(timeout_ms=100).values():
            records.extend(batch)
        if all(caught_up(consumer, tp) for tp in tps):
            return records
        if time.monotonic() > deadline:
            raise TimeoutError(f"did not reach the end of {len(tps)} partitions in {timeout_s}s")


def skip_to_end(consumer: KafkaConsumer, tps: Sequence[TopicPartition]) -> None:
    """Position ``tps`` at their ends, so that the next records read are new ones."""
    # A lower bound of the end on some brokers (see ``read_to_end``): skip the rest.
    for tp, end in consumer.end_offsets(list(tps)).items():
        consumer.seek(tp, end)
    read_to_end(consumer, tps)


def caught_up(consumer: KafkaConsumer, tp: TopicPartition) -> bool:
    """Whether the position has reached the high watermark of the last fetch."""
    highwater = consumer.highwater(tp)
    return highwater is not None and consumer.position(tp) >= highwater
