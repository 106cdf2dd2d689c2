"""Results: the index on ``status`` becomes a partial index of the results that did not
succeed, by model and time. Nearly every row is ``ok``: the full index cost every write
an index insert and served no query that selects by status.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_FAILED = "status <> 'ok'"


def upgrade() -> None:
    op.drop_index("ix_inference_results_status", table_name="inference_results")
    op.create_index(
        "ix_inference_results_failed",
        "inference_results",
        ["model", "created_at"],
        sqlite_where=sa.text(_FAILED),
        postgresql_where=sa.text(_FAILED),
    )


def downgrade() -> None:
    op.drop_index("ix_inference_results_failed", table_name="inference_results")
    op.create_index("ix_inference_results_status", "inference_results", ["status"])
