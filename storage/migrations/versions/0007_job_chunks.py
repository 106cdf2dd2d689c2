"""Distributed jobs run in chunks: each chunk's range, claim and checkpoint, and the part
files of the windows committed.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "job_chunks",
        sa.Column("job", sa.String(128), nullable=False),
        sa.Column("chunk", sa.Integer(), nullable=False),
        sa.Column("start", sa.BigInteger(), nullable=False),
        sa.Column("rows", sa.BigInteger(), nullable=False),
        sa.Column("checkpoint", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("runner", sa.String(255), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("job", "chunk", name="pk_job_chunks"),
    )
    op.create_index("ix_job_chunks_state", "job_chunks", ["state"])
    op.create_table(
        "job_parts",
        sa.Column("job", sa.String(128), nullable=False),
        sa.Column("start", sa.BigInteger(), nullable=False),
        sa.Column("rows", sa.BigInteger(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("output", sa.String(255), nullable=True),
        sa.Column("errors", sa.String(255), nullable=True),
        sa.PrimaryKeyConstraint("job", "start", name="pk_job_parts"),
    )


def downgrade() -> None:
    op.drop_table("job_parts")
    op.drop_index("ix_job_chunks_state", table_name="job_chunks")
    op.drop_table("job_chunks")
