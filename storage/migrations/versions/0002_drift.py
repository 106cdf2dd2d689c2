"""Drift: windows, fixed-bin histograms, references, flags, pending labels, reference
model checks; the anomaly index; views for windowed error and top anomalies.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ANOMALY = "ABS(output - expected) > 0.5"

# Portable SQL (SQLite and PostgreSQL): NULLIF guards the windows without labels.
_VIEWS = {
    "drift_window_errors": """
        SELECT model, model_version, window_start, window_s, rows, labelled,
               CAST(wrong AS DOUBLE PRECISION) / NULLIF(labelled, 0) AS error_rate,
               abs_error_sum / NULLIF(labelled, 0) AS mean_abs_error
        FROM drift_windows
    """,
    "top_anomalies": f"""
        SELECT request_id, model, model_version, output, expected,
               ABS(output - expected) AS abs_error, created_at
        FROM inference_log
        WHERE {_ANOMALY}
    """,
    "drift_flagged_windows": """
        SELECT f.model, f.model_version, f.window_start, f.metric, f.value, f.threshold,
               f.flagged_at, w.rows, w.labelled
        FROM drift_flags f
        LEFT JOIN drift_windows w
          ON w.model = f.model AND w.model_version = f.model_version
         AND w.window_start = f.window_start
    """,
}


def _key(*extra: sa.Column) -> list[sa.Column]:
    return [
        sa.Column("model", sa.String(255), nullable=False),
        sa.Column("model_version", sa.String(128), nullable=False),
        *extra,
    ]


def upgrade() -> None:
    op.create_index(
        "ix_inference_log_anomalies",
        "inference_log",
        ["created_at", "model"],
        sqlite_where=sa.text(_ANOMALY),
        postgresql_where=sa.text(_ANOMALY),
    )
    op.create_table(
        "drift_windows",
        *_key(sa.Column("window_start", sa.DateTime(timezone=True), nullable=False)),
        sa.Column("window_s", sa.Integer(), nullable=False),
        sa.Column("rows", sa.BigInteger(), nullable=False),
        sa.Column("labelled", sa.BigInteger(), nullable=False),
        sa.Column("wrong", sa.BigInteger(), nullable=False),
        sa.Column("abs_error_sum", sa.Double(), nullable=False),
        sa.Column("ref_checked", sa.BigInteger(), nullable=False),
        sa.Column("ref_deviant", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("model", "model_version", "window_start", name="pk_drift_windows"),
    )
    op.create_index("ix_drift_windows_window_start", "drift_windows", ["window_start"])
    op.create_table(
        "drift_bins",
        sa.Column("window_start", sa.DateTime(timezone=True), nullable=False),
        *_key(
            sa.Column("series", sa.String(16), nullable=False),
            sa.Column("bin", sa.Integer(), nullable=False),
        ),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "window_start", "model", "model_version", "series", "bin", name="pk_drift_bins"
        ),
    )
    op.create_table(
        "drift_references",
        *_key(
            sa.Column("series", sa.String(16), nullable=False),
            sa.Column("bin", sa.Integer(), nullable=False),
        ),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("lower", sa.Double(), nullable=True),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint(
            "model", "model_version", "series", "bin", name="pk_drift_references"
        ),
    )
    op.create_table(
        "drift_flags",
        *_key(
            sa.Column("window_start", sa.DateTime(timezone=True), nullable=False),
            sa.Column("metric", sa.String(32), nullable=False),
        ),
        sa.Column("value", sa.Double(), nullable=False),
        sa.Column("threshold", sa.Double(), nullable=False),
        sa.Column("flagged_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint(
            "model", "model_version", "window_start", "metric", name="pk_drift_flags"
        ),
    )
    op.create_index("ix_drift_flags_flagged_at", "drift_flags", ["flagged_at"])
    op.create_table(
        "drift_labels",
        sa.Column("request_id", sa.String(128), nullable=False),
        sa.Column("expected", sa.JSON(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("source_topic", sa.String(255), nullable=False),
        sa.Column("source_partition", sa.Integer(), nullable=False),
        sa.Column("source_offset", sa.BigInteger(), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("request_id", name="pk_drift_labels"),
    )
    op.create_index("ix_drift_labels_received_at", "drift_labels", ["received_at"])
    op.create_table(
        "reference_checks",
        sa.Column("request_id", sa.String(128), nullable=False),
        sa.Column("model", sa.String(255), nullable=False),
        sa.Column("model_version", sa.String(128), nullable=False),
        sa.Column("reference_model", sa.String(255), nullable=False),
        sa.Column("deviation", sa.Double(), nullable=False),
        sa.Column("tolerance", sa.Double(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("request_id", name="pk_reference_checks"),
    )
    op.create_index(
        "ix_reference_checks_model_created_at", "reference_checks", ["model", "created_at"]
    )
    for name, body in _VIEWS.items():
        op.execute(f"CREATE VIEW {name} AS {body}")


def downgrade() -> None:
    for name in _VIEWS:
        op.execute(f"DROP VIEW {name}")
    op.drop_index("ix_reference_checks_model_created_at", table_name="reference_checks")
    op.drop_table("reference_checks")
    op.drop_index("ix_drift_labels_received_at", table_name="drift_labels")
    op.drop_table("drift_labels")
    op.drop_index("ix_drift_flags_flagged_at", table_name="drift_flags")
    op.drop_table("drift_flags")
    op.drop_table("drift_references")
    op.drop_table("drift_bins")
    op.drop_index("ix_drift_windows_window_start", table_name="drift_windows")
    op.drop_table("drift_windows")
    op.drop_index("ix_inference_log_anomalies", table_name="inference_log")
