"""The SQL tables, as SQLAlchemy Core metadata.

The database schema itself comes from the Alembic migrations; a test checks that
they and this module agree.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    Double,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
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
    Index(None, "status"),
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

consumer_offsets = Table(
    "consumer_offsets",
    metadata,
    Column("group_id", String(255), primary_key=True),
    Column("topic", String(255), primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("next_offset", BigInteger, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

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
    Index(None, "state"),
)
