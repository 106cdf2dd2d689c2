"""Configuration: one validated, frozen object per concern, built once from env and flags."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from consumers.contract import Priority


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TopicConfig(_Frozen):
    high: str = "inferlane.requests.high"
    normal: str = "inferlane.requests"
    low: str = "inferlane.requests.low"
    results: str = "inferlane.results"
    dead_letters: str = "inferlane.requests.dlq"
    partitions: int = Field(default=3, ge=1)  # for topics the worker creates
    # Topics a request's ``reply_to`` may name, besides ``results`` (a full match).
    reply_to_pattern: str = r"inferlane\.results\..+"

    def lane_topics(self) -> dict[str, Priority]:
        return {self.high: Priority.HIGH, self.normal: Priority.NORMAL, self.low: Priority.LOW}

    def reply_to_allowed(self, topic: str) -> bool:
        return topic == self.results or re.fullmatch(self.reply_to_pattern, topic) is not None


class KafkaConfig(_Frozen):
    group_id: str = "inferlane"
    client_id: str = "inferlane-worker"
    fetch_max_records: int = Field(default=2000, ge=1)
    # Longest a fetch waits for data; Tansu holds an empty fetch this long even once data
    # arrives, so it bounds latency at low load (aiokafka's default 500 ms gave p50 150 ms).
    fetch_max_wait_ms: int = Field(default=20, ge=1)
    max_message_bytes: int = Field(default=1_048_576, ge=1024)  # larger requests: rejected
    # Tansu holds a join for about half of this: short keeps startup and rebalances quick.
    session_timeout_ms: int = Field(default=10_000, ge=6_000)
    linger_ms: int = 2
    # How long to wait for an unknown topic (a reply_to) before refusing its records.
    metadata_timeout_ms: int = Field(default=10_000, ge=100)

    @property
    def max_request_bytes(self) -> int:
        """Produce requests carry a whole rejected record back out, with headers."""
        return 2 * self.max_message_bytes + 65_536


class BatchConfig(_Frozen):
    max_batch: int = Field(default=256, ge=1)
    max_wait_ms: float = Field(default=5.0, ge=0)
    # Batches queued ahead of the compute thread, so it never waits for the loop.
    prefetch: int = Field(default=2, ge=1)

    @property
    def max_wait_s(self) -> float:
        return self.max_wait_ms / 1000.0


class LaneConfig(_Frozen):
    # Per lane; a full lane pauses its topic. Small windows keep queueing latency and
    # memory low: with a 150k backlog, 50k in flight ran ~20% slower than 10k and held
    # results ~8x longer (bench, digits).
    capacity: int = Field(default=4096, ge=1)
    # Consumed records not yet durable, by count and by value bytes: intake pauses when
    # either is spent, so an outage holds a bounded amount. Decoded inputs take a few
    # times their JSON size in memory.
    max_in_flight: int = Field(default=10_000, ge=1)
    max_in_flight_bytes: int = Field(default=64 * 2**20, ge=1024)
    # Share of that budget only the high topic may use: bulk topics pause before it.
    high_reserve: float = Field(default=0.1, ge=0, lt=1)
    single_lane: bool = False  # FIFO baseline: every request in one lane
    # Longest a rebalance waits for the revoked partitions' started work to be durable.
    rebalance_drain_s: float = Field(default=10.0, gt=0)


class SinkConfig(_Frozen):
    # Outcomes per Kafka produce round: small enough that a high-lane result never waits
    # long behind a chunk of bulk ones already on their way.
    max_chunk: int = Field(default=1024, ge=1)
    retry_backoff_s: float = Field(default=0.5, gt=0)
    retry_backoff_max_s: float = Field(default=10.0, gt=0)


class WorkerSettings(BaseSettings):
    """Everything the worker needs; env ``INFERLANE_*`` (nested with ``__``) and CLI flags."""

    model_config = SettingsConfigDict(
        env_prefix="INFERLANE_", env_nested_delimiter="__", frozen=True, extra="forbid"
    )

    bootstrap: str | None = None  # None: start the embedded broker
    database_url: str = "sqlite:///inferlane.db"
    models: Path | None = None  # registry TOML; None: the demo models
    torch_threads: int | None = Field(default=None, ge=1)
    topics: TopicConfig = TopicConfig()
    kafka: KafkaConfig = KafkaConfig()
    batching: BatchConfig = BatchConfig()
    lanes: LaneConfig = LaneConfig()
    sink: SinkConfig = SinkConfig()

    @model_validator(mode="after")
    def _distinct_topics(self) -> WorkerSettings:
        t = self.topics
        names = [t.high, t.normal, t.low, t.results, t.dead_letters]
        if len(set(names)) != len(names):
            raise ValueError("lane, results and dead-letter topics must be distinct")
        return self
