"""Initial schema: results, drift log, consumed offsets.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "inference_results",
        sa.Column("request_id", sa.String(128), nullable=False),
        sa.Column("model", sa.String(255), nullable=False),
        sa.Column("model_version", sa.String(128), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("priority", sa.String(16), nullable=False),
        sa.Column("outputs", sa.JSON(), nullable=True),
        sa.Column("error_code", sa.String(64), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("queue_ms", sa.Double(), nullable=False),
        sa.Column("compute_ms", sa.Double(), nullable=False),
        sa.Column("total_ms", sa.Double(), nullable=False),
        sa.Column("batch_id", sa.String(64), nullable=True),
        sa.Column("batch_size", sa.Integer(), nullable=False),
        sa.Column("source_topic", sa.String(255), nullable=False),
        sa.Column("source_partition", sa.Integer(), nullable=False),
        sa.Column("source_offset", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("request_id", name="pk_inference_results"),
    )
    op.create_index(
        "ix_inference_results_model_created_at", "inference_results", ["model", "created_at"]
    )
    op.create_index("ix_inference_results_status", "inference_results", ["status"])

    op.create_table(
        "inference_log",
        sa.Column("request_id", sa.String(128), nullable=False),
        sa.Column("model", sa.String(255), nullable=False),
        sa.Column("model_version", sa.String(128), nullable=True),
        sa.Column("output", sa.Double(), nullable=False),
        sa.Column("expected", sa.Double(), nullable=False),
        sa.Column("error", sa.Double(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("request_id", name="pk_inference_log"),
    )
    op.create_index("ix_inference_log_model_created_at", "inference_log", ["model", "created_at"])

    op.create_table(
        "consumer_offsets",
        sa.Column("group_id", sa.String(255), nullable=False),
        sa.Column("topic", sa.String(255), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("next_offset", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("group_id", "topic", "partition", name="pk_consumer_offsets"),
    )


def downgrade() -> None:
    op.drop_table("consumer_offsets")
    op.drop_index("ix_inference_log_model_created_at", table_name="inference_log")
    op.drop_table("inference_log")
    op.drop_index("ix_inference_results_status", table_name="inference_results")
    op.drop_index("ix_inference_results_model_created_at", table_name="inference_results")
    op.drop_table("inference_results")
