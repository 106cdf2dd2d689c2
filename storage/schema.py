"""The SQL tables, as SQLAlchemy Core metadata.

The database schema itself comes from the Alembic migrations; a test checks that
they and this module agree.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Double,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    text,
)

# Stable constraint and index names, so migrations can refer to them.
metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "pk": "pk_%(table_name)s",
    }
)

inference_results = Table(
    "inference_results",
    metadata,
    Column("request_id", String(128), primary_key=True),
    Column("model", String(255), nullable=False),
    Column("model_version", String(128)),
    Column("status", String(16), nullable=False),
    Column("priority", String(16), nullable=False),
    # none_as_null: a result without outputs is SQL NULL, not the JSON text 'null'.
    Column("outputs", JSON(none_as_null=True)),
    Column("error_code", String(64)),
    Column("error_message", Text),
    Column("queue_ms", Double, nullable=False),
    Column("compute_ms", Double, nullable=False),
    Column("total_ms", Double, nullable=False),
    Column("batch_id", String(64)),
    Column("batch_size", Integer, nullable=False),
    Column("source_topic", String(255), nullable=False),
    Column("source_partition", Integer, nullable=False),
    Column("source_offset", BigInteger, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index(None, "model", "created_at"),
)

# Partial (migration 0008): the few results that did not succeed, by model and time;
# an ``ok`` row, nearly every one, costs no index insert here.
FAILED_PREDICATE = "status <> 'ok'"
Index(
    "ix_inference_results_failed",
    inference_results.c.model,
    inference_results.c.created_at,
    sqlite_where=text(FAILED_PREDICATE),
    postgresql_where=text(FAILED_PREDICATE),
)

inference_log = Table(
    "inference_log",
    metadata,
    Column("request_id", String(128), primary_key=True),
    Column("model", String(255), nullable=False),
    Column("model_version", String(128)),
    Column("output", Double, nullable=False),
    Column("expected", Double, nullable=False),
    Column("error", Double, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index(None, "model", "created_at"),
)

# One row per generative request (migration 0006): its text, token counts and timings.
generations = Table(
    "generations",
    metadata,
    Column("request_id", String(128), primary_key=True),
    Column("model", String(255), nullable=False),
    Column("model_version", String(128)),
    Column("text", Text, nullable=False),
    Column("finish_reason", String(16), nullable=False),
    Column("prompt_tokens", Integer, nullable=False),
    Column("generated_tokens", Integer, nullable=False),
    Column("ttft_ms", Double),
    Column("tpot_ms", Double),
    Column("exact_match", Boolean),
    Column("f1", Double),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index(None, "model", "created_at"),
)

consumer_offsets = Table(
    "consumer_offsets",
    metadata,
    Column("group_id", String(255), primary_key=True),
    Column("topic", String(255), primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("next_offset", BigInteger, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

# -- drift windows (migration 0002) ----------------------------------------------------

# The anomaly predicate of the SQL contract, as its partial index states it.
ANOMALY_PREDICATE = "ABS(output - expected) > 0.5"

# Partial: only the rows off by more than 0.5, so the contract's anomaly query and
# ``inferlane anomalies --since`` read a small index instead of the whole log.
Index(
    "ix_inference_log_anomalies",
    inference_log.c.created_at,
    inference_log.c.model,
    sqlite_where=text(ANOMALY_PREDICATE),
    postgresql_where=text(ANOMALY_PREDICATE),
)
# A model version with no version is stored as "" (primary key columns are NOT NULL).

drift_windows = Table(
    "drift_windows",
    metadata,
    Column("model", String(255), primary_key=True),
    Column("model_version", String(128), primary_key=True),
    Column("window_start", DateTime(timezone=True), primary_key=True),
    Column("window_s", Integer, nullable=False),
    Column("rows", BigInteger, nullable=False),  # results observed
    Column("labelled", BigInteger, nullable=False),  # of them, with a drift-log pair
    Column("wrong", BigInteger, nullable=False),  # labelled with |output - expected| > 0.5
    Column("abs_error_sum", Double, nullable=False),
    Column("ref_checked", BigInteger, nullable=False),  # also run on the reference model
    Column("ref_deviant", BigInteger, nullable=False),  # of them, beyond its tolerance
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Index(None, "window_start"),
)

# Fixed-bin histograms per window: series "output" (the prediction) and "input" (the
# mean of a numeric input's features). Counts add up across workers and flushes.
# The key starts with the window: readers and retention select a time range.
drift_bins = Table(
    "drift_bins",
    metadata,
    Column("window_start", DateTime(timezone=True), primary_key=True),
    Column("model", String(255), primary_key=True),
    Column("model_version", String(128), primary_key=True),
    Column("series", String(16), primary_key=True),
    Column("bin", Integer, primary_key=True),
    Column("count", BigInteger, nullable=False),
)

# The reference histogram per model version: the first N results after it went live.
# ``lower`` is a numeric bin's lower edge (NULL: minus infinity, or a categorical bin).
drift_references = Table(
    "drift_references",
    metadata,
    Column("model", String(255), primary_key=True),
    Column("model_version", String(128), primary_key=True),
    Column("series", String(16), primary_key=True),
    Column("bin", Integer, primary_key=True),
    Column("kind", String(16), nullable=False),  # "categorical" or "numeric"
    Column("lower", Double),
    Column("count", BigInteger, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

# Windows that crossed a threshold, one row per metric: the worker's online decisions.
drift_flags = Table(
    "drift_flags",
    metadata,
    Column("model", String(255), primary_key=True),
    Column("model_version", String(128), primary_key=True),
    Column("window_start", DateTime(timezone=True), primary_key=True),
    Column("metric", String(32), primary_key=True),
    Column("value", Double, nullable=False),
    Column("threshold", Double, nullable=False),
    Column("flagged_at", DateTime(timezone=True), nullable=False),
    Index(None, "flagged_at"),
)

# Late labels whose result has not been seen yet; they wait a bounded time.
drift_labels = Table(
    "drift_labels",
    metadata,
    Column("request_id", String(128), primary_key=True),
    Column("expected", JSON, nullable=False),
    Column("value", Text, nullable=False),  # the record as it came, for its dead letter
    Column("source_topic", String(255), nullable=False),
    Column("source_partition", Integer, nullable=False),
    Column("source_offset", BigInteger, nullable=False),
    Column("received_at", DateTime(timezone=True), nullable=False),
    Index(None, "received_at"),
)

# Requests also run on a reference model: how far the served output was from its output.
reference_checks = Table(
    "reference_checks",
    metadata,
    Column("request_id", String(128), primary_key=True),
    Column("model", String(255), nullable=False),
    Column("model_version", String(128), nullable=False),
    Column("reference_model", String(255), nullable=False),
    Column("deviation", Double, nullable=False),
    Column("tolerance", Double, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index(None, "model", "created_at"),
)

# -- offline scoring jobs (migration 0003) ---------------------------------------------

# Offline scoring jobs: parameters, state and the resume point. A local job moves
# ``checkpoint`` (rows durable) in the same transaction as the results of those rows.
jobs = Table(
    "jobs",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("kind", String(16), nullable=False),  # "local" or "distributed"
    Column("model", String(255), nullable=False),
    Column("state", String(16), nullable=False),
    Column("params", JSON, nullable=False),
    Column("rows_total", BigInteger),
    Column("checkpoint", BigInteger, nullable=False),
    Column("errors", BigInteger, nullable=False),
    Column("labelled", BigInteger, nullable=False),
    Column("correct", BigInteger, nullable=False),
    Column("abs_error_sum", Double, nullable=False),
    Column("recomputed", BigInteger, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    # Migration 0005: why a failed job stopped; the process running it (host:pid), which
    # writes ``heartbeat_at`` with the database's clock while it runs.
    Column("error", Text),
    Column("runner", String(255)),
    Column("heartbeat_at", DateTime(timezone=True)),
    Index(None, "state"),
)

# A distributed job's chunks (migration 0007): row ranges of its input, each claimed by
# one worker at a time. ``attempt`` counts the claims; a worker's writes name the attempt
# they belong to, so one that lost its claim (no heartbeat for a while) cannot commit.
job_chunks = Table(
    "job_chunks",
    metadata,
    Column("job", String(128), primary_key=True),
    Column("chunk", Integer, primary_key=True),
    Column("start", BigInteger, nullable=False),  # first row
    Column("rows", BigInteger, nullable=False),
    Column("checkpoint", BigInteger, nullable=False),  # first row not yet committed
    Column("state", String(16), nullable=False),  # pending, running, done, failed
    Column("attempt", Integer, nullable=False),
    Column("runner", String(255)),  # host:pid of the worker that holds or held it
    Column("heartbeat_at", DateTime(timezone=True)),  # the database's clock
    Column("error", Text),  # why it failed
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Index(None, "state"),
)

# The part files of a distributed job's committed windows, written in the transaction
# that commits the window's results: the export reads exactly these, in row order.
job_parts = Table(
    "job_parts",
    metadata,
    Column("job", String(128), primary_key=True),
    Column("start", BigInteger, primary_key=True),  # the window's first row
    Column("rows", BigInteger, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("output", String(255)),  # file name in the job's parts folder; None: no good row
    Column("errors", String(255)),  # its bad rows' file; None: none
)

# -- model rollouts (migration 0004) ---------------------------------------------------

# One row per rollout of a candidate version; every worker routes by the newest row of
# each model. A decision moves ``revision`` on, and only from the value its writer
# read, so the workers sharing a rollout take each decision once.
rollouts = Table(
    "rollouts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("model", String(255), nullable=False),
    Column("candidate_version", String(128), nullable=False),
    Column("primary_version", String(128), nullable=False),
    Column("mode", String(16), nullable=False),  # "shadow" or "canary"
    Column("state", String(16), nullable=False),
    Column("steps", JSON, nullable=False),  # canary shares in percent
    Column("step", Integer, nullable=False),  # index into steps
    Column("share", Double, nullable=False),  # of requests the candidate answers, 0..1
    Column("sample", Double, nullable=False),
    Column("interval_s", Double, nullable=False),
    Column("passes_needed", Integer, nullable=False),
    Column("passes", Integer, nullable=False),  # consecutive passing intervals at this step
    Column("gates", JSON, nullable=False),  # the gate thresholds
    Column("revision", Integer, nullable=False),
    Column("interval_start", DateTime(timezone=True), nullable=False),
    Column("reason", Text),  # of the last decision
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Index(None, "model", "id"),
)

# At most one running rollout per model, even when two starts race.
ROLLOUT_RUNNING_PREDICATE = "state = 'running'"
Index(
    "ix_rollouts_running_model",
    rollouts.c.model,
    unique=True,
    sqlite_where=text(ROLLOUT_RUNNING_PREDICATE),
    postgresql_where=text(ROLLOUT_RUNNING_PREDICATE),
)

# Each decision on a rollout, with the gate values it was taken on.
rollout_events = Table(
    "rollout_events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("rollout_id", Integer, nullable=False),
    Column("at", DateTime(timezone=True), nullable=False),
    Column("step", Integer, nullable=False),
    Column("share", Double, nullable=False),
    Column("decision", String(16), nullable=False),
    Column("gates", JSON, nullable=False),
    Column("reason", Text),
    Index(None, "rollout_id", "id"),
)

# What each worker measured of each version in an analysis interval. A worker
# overwrites its own row with its running totals, so a repeated flush counts once.
rollout_stats = Table(
    "rollout_stats",
    metadata,
    Column("rollout_id", Integer, primary_key=True),
    Column("interval_start", DateTime(timezone=True), primary_key=True),
    Column("role", String(16), primary_key=True),  # "primary" or "candidate"
    Column("worker", String(128), primary_key=True),
    Column("requests", BigInteger, nullable=False),
    Column("errors", BigInteger, nullable=False),
    Column("latency_bins", JSON, nullable=False),  # fixed-bin latency histogram
    Column("compared", BigInteger, nullable=False),  # answered by both versions
    Column("disagreement_sum", Double, nullable=False),
    Column("labelled", BigInteger, nullable=False),
    Column("wrong", BigInteger, nullable=False),
    Column("abs_error_sum", Double, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)
