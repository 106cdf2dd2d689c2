"""Generative requests: one row each with the text, token counts, time to first token
and time per output token.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "generations",
        sa.Column("request_id", sa.String(128), nullable=False),
        sa.Column("model", sa.String(255), nullable=False),
        sa.Column("model_version", sa.String(128), nullable=True),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("finish_reason", sa.String(16), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("generated_tokens", sa.Integer(), nullable=False),
        sa.Column("ttft_ms", sa.Double(), nullable=True),
        sa.Column("tpot_ms", sa.Double(), nullable=True),
        sa.Column("exact_match", sa.Boolean(), nullable=True),
        sa.Column("f1", sa.Double(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("request_id", name="pk_generations"),
    )
    op.create_index("ix_generations_model_created_at", "generations", ["model", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_generations_model_created_at", table_name="generations")
    op.drop_table("generations")
