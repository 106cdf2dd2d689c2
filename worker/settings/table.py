"""README's Configuration table, generated from the settings: ``python -m
worker.settings.table`` prints it, ``--write README.md`` puts it between the markers.

Each row holds one setting or a family of them (the topic names, the Kafka security
settings, ...); the names and defaults come from ``WorkerSettings``, the words from
``ROWS``. Every setting has exactly one row: a new setting without one, or a row naming
a setting that is gone, stops the table (and ``tests/worker/test_settings_table.py``).
"""

from __future__ import annotations

import argparse
import fnmatch
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from worker.settings.sections import WorkerSettings

BEGIN = "<!-- settings table: python -m worker.settings.table --write README.md -->"
END = "<!-- end of settings table -->"


@dataclass(frozen=True)
class Row:
    names: tuple[str, ...]  # dotted setting paths; ``*`` matches a family
    what: str
    shown: tuple[str, str] | None = None  # (settings, default) as written, for a large family


def row(*names: str, what: str, shown: tuple[str, str] | None = None) -> Row:
    return Row(names, what, shown)


ROWS = (
    row("bootstrap", what="Kafka bootstrap servers; unset: an embedded broker (memory only)"),
    row("database_url", what="SQLAlchemy URL of the results store (SQLite or PostgreSQL)"),
    row("models", what="Model registry TOML (below); unset: the demo models"),
    row(
        "device",
        "torch_threads",
        what="Where models run (`auto`: CUDA when present, else CPU; `cpu`, `cuda:1`, ...), "
        "and torch's intra-op threads (unset: torch's default)",
    ),
    row(
        "topics.high",
        "topics.normal",
        "topics.low",
        "topics.results",
        "topics.dead_letters",
        "topics.jobs",
        what="Topic names: the three lanes, results, dead letters, distributed jobs' chunks",
    ),
    row("topics.partitions", what="Partitions of the topics the worker creates"),
    row(
        "topics.reply_to_pattern",
        what="Topics a request's `reply_to` may name besides `results` (a full match)",
    ),
    row("kafka.group_id", "kafka.client_id", what="Consumer group and client id"),
    row(
        "kafka.fetch_max_records",
        "kafka.linger_ms",
        "kafka.commit_interval_ms",
        what="Records one fetch hands over; how long a produce waits to fill a request; "
        "how often the group's offsets go to Kafka (SQL holds them for restarts)",
    ),
    row(
        "kafka.max_message_bytes",
        what="Largest request accepted; larger ones are rejected to the dead-letter topic",
    ),
    row(
        "kafka.session_timeout_ms",
        "kafka.metadata_timeout_ms",
        "lanes.rebalance_drain_s",
        what="Group session timeout; wait for an unknown `reply_to` topic; longest a "
        "rebalance waits for the revoked partitions' started work",
    ),
    row(
        "kafka.security.*",
        what="TLS and SASL for every Kafka client (docs/OPERATIONS.md)",
        shown=("`kafka.security.*`: `protocol`, `sasl_*`, `ssl_*`", "`PLAINTEXT`"),
    ),
    row(
        "batching.max_batch",
        "batching.max_wait_ms",
        what="Largest batch, and longest a batch waits to fill after its first request",
    ),
    row("batching.prefetch", what="Batches queued ahead of each compute thread"),
    row(
        "batching.swap_patience_ms",
        what="Longest another model's request waits while a lane serves the model on the "
        "device first (fewer swaps under interleaved traffic)",
    ),
    row(
        "lanes.capacity",
        "lanes.max_in_flight",
        "lanes.max_in_flight_bytes",
        "lanes.high_reserve",
        what="Requests per lane; records and value bytes consumed and not yet durable "
        "(intake pauses when either is spent); the share of that kept for the high topic",
    ),
    row("sink.max_chunk", what="Outcomes per Kafka produce round and SQL write"),
    row(
        "sink.write_process",
        "sink.write_nice",
        what="SQL writes in a child process at this nice value above the worker's, "
        "instead of a thread (not for in-memory SQLite)",
    ),
    row(
        "sink.retry_backoff_s",
        "sink.retry_backoff_max_s",
        "model_store.retry_backoff_s",
        "model_store.retry_backoff_max_s",
        what="First and longest wait before retrying the broker or database (sink), "
        "and a model that failed to load (model store); doubling in between",
    ),
    row(
        "model_store.device_bytes",
        "model_store.host_bytes",
        what="Byte budgets of the device and host tiers (docs/MODEL_STORE.md)",
    ),
    row(
        "model_store.watch_interval_s",
        what="How often the registry file is checked for changes; 0: no hot reload",
    ),
    row(
        "ops.http_port",
        "ops.http_host",
        what="The HTTP surface: /metrics, /healthz, /readyz, status page; port 0: none",
    ),
    row(
        "ops.ready_max_lag",
        "ops.db_probe_timeout_s",
        "ops.broker_probe_timeout_s",
        what="/readyz fails above this consumer lag (records), or when the database or "
        "broker does not answer within these timeouts",
    ),
    row(
        "scheduling.policy",
        "scheduling.decide_every_ms",
        "scheduling.busy_window_s",
        "scheduling.nvml_every_s",
        what="Batch cap: `adaptive` (the controller) or `fixed` (max_batch); controller "
        "tick; CPU busy window; NVML read period (docs/SCHEDULING.md)",
    ),
    row(
        "scheduling.share_*",
        what="Minimum share of batches per lane while every lane is backlogged, and the "
        "batches they are counted over",
    ),
    row(
        "scheduling.*_timeout_ms",
        what="Default deadline per lane for requests without `timeout_ms`/`deadline_ms`",
    ),
    row(
        "scheduling.*_latency_target_ms",
        what="Per lane: the 95th percentile of one forward pass its batches may reach; "
        "unset: the model's highest-throughput size",
    ),
    row(
        "scheduling.slice_ms",
        "scheduling.active_window_s",
        "scheduling.yield_share",
        what="While a higher lane is active (an item this recent), lower batches are cut "
        "to this long; bulk work waits for high requests at most this share of the time",
    ),
    row(
        "compute.timeout_s",
        "compute.max_hung_threads",
        what="A batch running longer fails with `model_timeout` and its thread is "
        "replaced; past this many hung threads the worker exits to be restarted",
    ),
    row(
        "compute.cuda_streams",
        "compute.lower_lanes_in_flight",
        what="CUDA: one stream per lane, and lower lanes' batches on the device at once",
    ),
    row(
        "compute.lane_threads",
        "compute.normal_nice",
        "compute.low_nice",
        "compute.replicas",
        what="CPU: one compute thread per lane, the lower lanes' niced by these, and "
        "batches the normal and low lanes each run side by side",
    ),
    row(
        "gc.full_every_s",
        what="Seconds between full passes of the cyclic garbage collector (unset: "
        "CPython's own rule)",
    ),
    row(
        "drift.enabled",
        "drift.window_s",
        "drift.reference_rows",
        "drift.bins",
        "drift.flush_s",
        what="Drift windows: length, rows that make a version's reference, histogram "
        "bins, flush period (docs/DRIFT.md)",
    ),
    row(
        "drift.thresholds.alpha",
        "drift.thresholds.*_max",
        "drift.thresholds.min_*",
        what="When a window is flagged: test level, PSI / JS / KS / error-rate / MAE "
        "limits, least rows and labels; a registry entry's `drift` table overrides them",
    ),
    row(
        "drift.thresholds.reference_*",
        what="A reference model run on a share of batches, and how far it may differ",
    ),
    row(
        "drift.labels_topic",
        "drift.label_wait_s",
        what="Late labels' topic (unset: none), and how long an unknown id waits",
    ),
    row(
        "rollout.poll_s",
        "rollout.compare_queue",
        what="How often rollouts are read from SQL; batches waiting to be compared",
    ),
)


def settings_paths(model: type[BaseModel] = WorkerSettings, prefix: str = "") -> Iterator[str]:
    for name, field in model.model_fields.items():
        kind = field.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            yield from settings_paths(kind, f"{prefix}{name}.")
        else:
            yield prefix + name


def _default(path: str) -> object:
    value: object = WorkerSettings.model_construct()
    for part in path.split("."):
        value = getattr(value, part)
    return value


def _shown(path: str) -> str:
    value = _default(path)
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "on" if value else "off"
    if path.endswith("_bytes") and isinstance(value, int) and value >= 2**20:
        return f"{value / 2**20:g} MiB" if value < 2**30 else f"{value / 2**30:g} GiB"
    if isinstance(value, str):
        return f"`{value}`"
    return str(value) if isinstance(value, int) else f"{value:g}"


def rows_of_settings() -> list[tuple[list[str], Row]]:
    """Each row with the settings it holds, in order; ``ValueError`` for a setting with
    no row, or in two, or a row that matches none."""
    paths = list(settings_paths())
    held: dict[str, Row] = {}
    out = []
    for r in ROWS:
        matched = (p for n in r.names for p in paths if fnmatch.fnmatchcase(p, n))
        names = list(dict.fromkeys(matched))  # in the row's order
        if not names:
            raise ValueError(f"a row names no setting: {', '.join(r.names)}")
        for name in names:
            if name in held:
                raise ValueError(f"{name} has two rows")
            held[name] = r
        out.append((names, r))
    missing = [p for p in paths if p not in held]
    if missing:
        raise ValueError(f"settings without a row: {', '.join(missing)}")
    return out


def render() -> str:
    lines = ["| setting | default | what it does |", "|---|---|---|"]
    for names, r in rows_of_settings():
        shown = [_shown(n) for n in names]
        settings = ", ".join(f"`{n}`" for n in names)
        defaults = shown[0] if len(set(shown)) == 1 else " / ".join(shown)
        if r.shown is not None:
            settings, defaults = r.shown
        lines.append(f"| {settings} | {defaults} | {r.what} |")
    return "\n".join(lines) + "\n"


def written_into(text: str) -> str:
    """``text`` with the table between its markers replaced by the current one."""
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return f"{text[:start]}\n{render()}{text[end:]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, metavar="README", help="update this file")
    args = parser.parse_args()
    if args.write is None:
        print(render(), end="")
        return
    args.write.write_text(written_into(args.write.read_text()))


if __name__ == "__main__":
    main()
