"""Model rollouts: the rollout of a candidate version, its decisions and its measurements.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Copied, not imported: a migration keeps the schema of its own day.
_RUNNING = "state = 'running'"


def upgrade() -> None:
    op.create_table(
        "rollouts",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("model", sa.String(255), nullable=False),
        sa.Column("candidate_version", sa.String(128), nullable=False),
        sa.Column("primary_version", sa.String(128), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("steps", sa.JSON(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("share", sa.Double(), nullable=False),
        sa.Column("sample", sa.Double(), nullable=False),
        sa.Column("interval_s", sa.Double(), nullable=False),
        sa.Column("passes_needed", sa.Integer(), nullable=False),
        sa.Column("passes", sa.Integer(), nullable=False),
        sa.Column("gates", sa.JSON(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("interval_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_rollouts"),
    )
    op.create_index("ix_rollouts_model_id", "rollouts", ["model", "id"])
    op.create_index(
        "ix_rollouts_running_model",
        "rollouts",
        ["model"],
        unique=True,
        sqlite_where=sa.text(_RUNNING),
        postgresql_where=sa.text(_RUNNING),
    )
    op.create_table(
        "rollout_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("rollout_id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("share", sa.Double(), nullable=False),
        sa.Column("decision", sa.String(16), nullable=False),
        sa.Column("gates", sa.JSON(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_rollout_events"),
    )
    op.create_index("ix_rollout_events_rollout_id_id", "rollout_events", ["rollout_id", "id"])
    op.create_table(
        "rollout_stats",
        sa.Column("rollout_id", sa.Integer(), nullable=False),
        sa.Column("interval_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("worker", sa.String(128), nullable=False),
        sa.Column("requests", sa.BigInteger(), nullable=False),
        sa.Column("errors", sa.BigInteger(), nullable=False),
        sa.Column("latency_bins", sa.JSON(), nullable=False),
        sa.Column("compared", sa.BigInteger(), nullable=False),
        sa.Column("disagreement_sum", sa.Double(), nullable=False),
        sa.Column("labelled", sa.BigInteger(), nullable=False),
        sa.Column("wrong", sa.BigInteger(), nullable=False),
        sa.Column("abs_error_sum", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint(
            "rollout_id", "interval_start", "role", "worker", name="pk_rollout_stats"
        ),
    )


def downgrade() -> None:
    op.drop_table("rollout_stats")
    op.drop_index("ix_rollout_events_rollout_id_id", table_name="rollout_events")
    op.drop_table("rollout_events")
    op.drop_index("ix_rollouts_running_model", table_name="rollouts")
    op.drop_index("ix_rollouts_model_id", table_name="rollouts")
    op.drop_table("rollouts")
