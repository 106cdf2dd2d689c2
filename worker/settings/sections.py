"""Configuration: one validated, frozen object per concern, built once from env and flags."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from consumers.config import KafkaConfig
from consumers.contract import Priority
from worker.base.backoff import Backoff
from worker.settings.drift_thresholds import DriftThresholds


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TopicConfig(_Frozen):
    high: str = "inferlane.requests.high"
    normal: str = "inferlane.requests"
    low: str = "inferlane.requests.low"
    results: str = "inferlane.results"
    dead_letters: str = "inferlane.requests.dlq"
    # Distributed jobs' chunk descriptors (docs/JOBS.md); None: this worker takes no chunks.
    jobs: str | None = "inferlane.jobs"
    partitions: int = Field(default=3, ge=1)  # for topics the worker creates
    # Topics a request's ``reply_to`` may name, besides ``results`` (a full match).
    reply_to_pattern: str = r"inferlane\.results\..+"

    def lane_topics(self) -> dict[str, Priority]:
        return {self.high: Priority.HIGH, self.normal: Priority.NORMAL, self.low: Priority.LOW}

    def reply_to_allowed(self, topic: str) -> bool:
        return topic == self.results or re.fullmatch(self.reply_to_pattern, topic) is not None


class BatchConfig(_Frozen):
    max_batch: int = Field(default=256, ge=1)
    max_wait_ms: float = Field(default=5.0, ge=0)
    # Batches queued ahead of the compute thread, so it never waits for the loop.
    prefetch: int = Field(default=2, ge=1)
    # Within a lane, requests for a model already on the device go first, so interleaved
    # traffic does not swap models in and out; another model's oldest request waits at
    # most this long for that.
    swap_patience_ms: float = Field(default=200.0, ge=0)

    @property
    def max_wait_s(self) -> float:
        return self.max_wait_ms / 1000.0

    @property
    def swap_patience_s(self) -> float:
        return self.swap_patience_ms / 1000.0


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
    # Longest a rebalance waits for the revoked partitions' started work to be durable.
    rebalance_drain_s: float = Field(default=10.0, gt=0)


class SinkConfig(_Frozen):
    # Outcomes per Kafka produce round: the event loop hands each to the producer in one
    # go, so this bounds how long a bulk chunk holds the loop (and a high result).
    max_chunk: int = Field(default=256, ge=1)
    # Results written by a child process (``storage.write_process``), off the event
    # loop's interpreter lock, instead of a thread of the worker: a digits backlog
    # drains faster, and the loop, busier with it, answers high requests later
    # (docs/BENCHMARKS.md). Not for an in-memory SQLite database (one per process).
    write_process: bool = False
    # How far below the worker's CPU priority the writer process runs (0-19): results
    # are on Kafka before SQL, so the write can wait while the loop and high lane run.
    write_nice: int = Field(default=10, ge=0, le=19)
    retry_backoff_s: float = Field(default=0.5, gt=0)
    retry_backoff_max_s: float = Field(default=10.0, gt=0)

    @property
    def backoff(self) -> Backoff:
        return Backoff(self.retry_backoff_s, self.retry_backoff_max_s)


class ModelStoreConfig(_Frozen):
    """Tier budgets in bytes, charged with each model's measured memory.

    Defaults follow common practice for mid-size models (BERT-base, ~440 MB): about two
    on the device and five in host memory; the rest wait on disk.
    """

    device_bytes: int = Field(default=1 << 30, ge=0)
    host_bytes: int = Field(default=5 << 29, ge=0)  # 2.5 GiB
    # A model that fails to load is retried in the background, backing off to the max.
    retry_backoff_s: float = Field(default=1.0, gt=0)
    retry_backoff_max_s: float = Field(default=60.0, gt=0)
    # How often the registry file's mtime is checked; 0 disables hot reload.
    watch_interval_s: float = Field(default=2.0, ge=0)

    @property
    def backoff(self) -> Backoff:
        return Backoff(self.retry_backoff_s, self.retry_backoff_max_s)


class OpsConfig(_Frozen):
    """The worker's HTTP surface: /metrics, /healthz, /readyz and the status page."""

    http_port: int = Field(default=9400, ge=0, le=65535)  # 0: no HTTP surface
    http_host: str = "127.0.0.1"
    # /readyz fails while any partition's lag is above this many records.
    ready_max_lag: int = Field(default=100_000, ge=1)
    db_probe_timeout_s: float = Field(default=2.0, gt=0)
    broker_probe_timeout_s: float = Field(default=2.0, gt=0)


class SchedulingConfig(_Frozen):
    """The scheduler (docs/SCHEDULING.md): batch controller, lane shares, deadlines, slices."""

    # adaptive: utilization + queue depth + measured throughput curve + latency guard;
    # fixed: the cap stays at max_batch. (The bench's naive baseline is no setting:
    # bench.baseline_worker passes it to the worker.)
    policy: Literal["adaptive", "fixed"] = "adaptive"
    decide_every_ms: float = Field(default=250.0, gt=0)  # controller tick
    busy_window_s: float = Field(default=2.0, gt=0)  # CPU probe: busy fraction over this
    nvml_every_s: float = Field(default=0.5, gt=0)  # GPU probe: NVML read period
    # Minimum share of batches per lane while every lane is backlogged (high/normal/low).
    share_high: float = Field(default=0.70, ge=0, le=1)
    share_normal: float = Field(default=0.25, ge=0, le=1)
    share_low: float = Field(default=0.05, ge=0, le=1)
    share_window: int = Field(default=100, ge=10)  # batches the shares are counted over
    # Lane default timeouts (requests without timeout_ms/deadline_ms); None: no deadline.
    high_timeout_ms: int | None = Field(default=None, ge=1)
    normal_timeout_ms: int | None = Field(default=None, ge=1)
    low_timeout_ms: int | None = Field(default=None, ge=1)
    # While a higher lane is active, lower-lane batches are cut to what the throughput
    # curve says computes within this long, so a high batch waits at most about a slice.
    slice_ms: float | None = Field(default=25.0, gt=0)
    active_window_s: float = Field(default=1.0, gt=0)  # "active": an item seen this recently
    # From a high request's admission until its result is on Kafka, bulk work (a lower
    # lane's next batch, bulk admission and publishing) waits, for at most this share of
    # any second (worker/scheduling/yield_to_high.py). None: never.
    yield_share: float | None = Field(default=0.1, gt=0, le=1)
    # Per lane: the tail (95th percentile) of one forward pass a batch of that lane may
    # reach; the throughput curve sizes it. None: the model's cap (highest items/s).
    high_latency_target_ms: float | None = Field(default=200.0, gt=0)
    normal_latency_target_ms: float | None = Field(default=None, gt=0)
    low_latency_target_ms: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _shares_fit(self) -> SchedulingConfig:
        if self.share_high + self.share_normal + self.share_low > 1.0 + 1e-9:
            raise ValueError("lane shares must add up to at most 1")
        return self

    def lane_latency_targets_ms(self) -> dict[Priority, float | None]:
        return {
            Priority.HIGH: self.high_latency_target_ms,
            Priority.NORMAL: self.normal_latency_target_ms,
            Priority.LOW: self.low_latency_target_ms,
        }

    def lane_timeouts_ms(self) -> dict[Priority, int | None]:
        return {
            Priority.HIGH: self.high_timeout_ms,
            Priority.NORMAL: self.normal_timeout_ms,
            Priority.LOW: self.low_timeout_ms,
        }

    def lane_shares(self) -> dict[Priority, float]:
        return {
            Priority.HIGH: self.share_high,
            Priority.NORMAL: self.share_normal,
            Priority.LOW: self.share_low,
        }


class ComputeConfig(_Frozen):
    # A batch running longer than this (a hung model) fails its requests with model_timeout
    # and its thread is replaced; a model's registry entry may set its own
    # (compute_timeout_s). None: no limit.
    timeout_s: float | None = Field(default=60.0, gt=0)
    # Hung threads cannot be stopped, only left behind: past this many, the worker exits
    # so that its supervisor restarts a clean process.
    max_hung_threads: int = Field(default=3, ge=1)
    # When the models' device is CUDA: one stream per lane, with stream priorities
    # (docs/SCHEDULING.md, "CUDA streams"). Off, or on a CPU: one compute thread.
    cuda_streams: bool = True
    # CUDA streams: batches of the lanes below high running on the device at once, so a
    # high batch shares it with at most this many.
    lower_lanes_in_flight: int = Field(default=1, ge=1)
    # On the CPU: one compute thread per lane, these added to the lower lanes' threads'
    # Linux nice values, so the OS runs a high batch while a bulk one is in progress.
    # Off: one compute thread, queued batches highest lane first.
    lane_threads: bool = True
    normal_nice: int = Field(default=0, ge=0, le=19)
    low_nice: int = Field(default=10, ge=0, le=19)
    # With lane threads: the normal and low lanes each run this many batches side by side,
    # every one on its share of the torch threads (the high lane keeps them all, for
    # latency). Independent passes do not wait for each other's slowest OpenMP thread
    # when other work takes a core (docs/SCHEDULING.md, "Replicas"). Capped at the torch
    # thread count.
    replicas: int = Field(default=2, ge=1)

    def nice(self) -> dict[Priority, int]:
        """What each lane's compute thread adds to the process's nice value."""
        return {Priority.HIGH: 0, Priority.NORMAL: self.normal_nice, Priority.LOW: self.low_nice}


class GcConfig(_Frozen):
    """CPython's cyclic garbage collector (docs/SCHEDULING.md, "Garbage collection")."""

    # The worker runs the full pass itself this often, instead of whenever the promoted
    # objects reach a quarter of the old ones (every fraction of a second under a
    # backlog). Cyclic garbage that outlives the young passes is held until then.
    # None: CPython's own rule.
    full_every_s: float | None = Field(default=60.0, gt=0)


class DriftConfig(_Frozen):
    """Drift windows, references and late labels (docs/DRIFT.md)."""

    enabled: bool = True
    window_s: int = Field(default=60, ge=1)  # stored windows; the CLI joins them into larger
    reference_rows: int = Field(default=500, ge=10)  # first results of a version: reference
    bins: int = Field(default=10, ge=2)  # numeric series: quantile bins of the reference
    flush_s: float = Field(default=1.0, gt=0)
    # Defaults for every model; a registry entry's ``drift`` table overrides them.
    thresholds: DriftThresholds = DriftThresholds()
    labels_topic: str | None = "inferlane.labels"  # None: no late labels
    label_wait_s: float = Field(default=600.0, gt=0)  # unknown ids then go to dead letters


class RolloutConfig(_Frozen):
    """How the worker follows the rollouts in SQL (docs/ROLLOUTS.md)."""

    # Read the rollouts, write this worker's interval counts, judge due intervals.
    poll_s: float = Field(default=1.0, gt=0)
    compare_queue: int = Field(default=64, ge=1)  # batches waiting for the other version


class WorkerSettings(BaseSettings):
    """Everything the worker needs; env ``INFERLANE_*`` (nested with ``__``) and CLI flags."""

    model_config = SettingsConfigDict(
        env_prefix="INFERLANE_", env_nested_delimiter="__", frozen=True, extra="forbid"
    )

    bootstrap: str | None = None  # None: start the embedded broker
    database_url: str = "sqlite:///inferlane.db"
    models: Path | None = None  # registry TOML; None: the demo models
    torch_threads: int | None = Field(default=None, ge=1)
    # Where models run: "auto" (CUDA when a device is present, else the CPU) or a torch
    # device such as "cpu" or "cuda:1". On CUDA, batches run on lane streams.
    device: str = "auto"
    topics: TopicConfig = TopicConfig()
    kafka: KafkaConfig = KafkaConfig()
    batching: BatchConfig = BatchConfig()
    lanes: LaneConfig = LaneConfig()
    sink: SinkConfig = SinkConfig()
    model_store: ModelStoreConfig = ModelStoreConfig()
    ops: OpsConfig = OpsConfig()
    scheduling: SchedulingConfig = SchedulingConfig()
    compute: ComputeConfig = ComputeConfig()
    gc: GcConfig = GcConfig()
    drift: DriftConfig = DriftConfig()
    rollout: RolloutConfig = RolloutConfig()

    @field_validator("device")
    @classmethod
    def _known_device(cls, value: str) -> str:
        if value != "auto":
            import torch  # here, not at the top: reading settings should not load torch

            try:
                torch.device(value)
            except RuntimeError as exc:  # a name torch does not know
                raise ValueError(f"device {value!r}: {exc}") from exc
        return value

    @model_validator(mode="after")
    def _distinct_topics(self) -> WorkerSettings:
        t = self.topics
        names = [t.high, t.normal, t.low, t.results, t.dead_letters]
        names += [t.jobs] if t.jobs is not None else []
        if len(set(names)) != len(names):
            raise ValueError("lane, results, dead-letter and jobs topics must be distinct")
        return self
