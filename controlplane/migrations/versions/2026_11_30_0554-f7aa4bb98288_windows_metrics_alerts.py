"""Windows, window metrics, alerts, scan marks; the input-length baseline on tasks.

Revision ID: f7aa4bb98288
Revises: d793772727ee
Create Date: 2026-11-30 05:54:51.459646
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "f7aa4bb98288"
down_revision: str | None = "d793772727ee"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:

    op.create_table(
        "scan_marks",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("last_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column(
            "previous_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_scan_marks")),
    )
    op.create_table(
        "alerts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("window_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("baseline", sa.Float(), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("opened_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("acknowledged_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("acknowledged_by", sa.String(length=200), nullable=True),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name=op.f("fk_alerts_task_id_tasks"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alerts")),
    )
    with op.batch_alter_table("alerts", schema=None) as batch_op:
        batch_op.create_index("ix_alerts_state_opened_at", ["state", "opened_at"], unique=False)
        batch_op.create_index(
            "uq_alerts_task_id_kind_active",
            ["task_id", "kind"],
            unique=True,
            postgresql_where=sa.text("state <> 'resolved'"),
            sqlite_where=sa.text("state <> 'resolved'"),
        )

    op.create_table(
        "windows",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("window_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("window_end", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "length_buckets",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("config_version", sa.Integer(), nullable=False),
        sa.Column("computed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("alerts_evaluated", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name=op.f("fk_windows_task_id_tasks"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_windows")),
        sa.UniqueConstraint(
            "task_id", "window_start", name=op.f("uq_windows_task_id_window_start")
        ),
    )
    with op.batch_alter_table("windows", schema=None) as batch_op:
        batch_op.create_index("ix_windows_open", ["closed_at", "task_id"], unique=False)

    op.create_table(
        "window_metrics",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column(
            "window_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("window_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("bucket", sa.String(length=32), nullable=False),
        sa.Column("n_results", sa.Integer(), nullable=False),
        sa.Column("n_pairs", sa.Integer(), nullable=False),
        sa.Column("n_agree", sa.Integer(), nullable=False),
        sa.Column("n_conflict", sa.Integer(), nullable=False),
        sa.Column("n_invalid", sa.Integer(), nullable=False),
        sa.Column("n_edge_runs", sa.Integer(), nullable=False),
        sa.Column("n_edge_errors", sa.Integer(), nullable=False),
        sa.Column("n_edge_fails", sa.Integer(), nullable=False),
        sa.Column("n_edge_attempts", sa.Integer(), nullable=False),
        sa.Column("n_offload_fails", sa.Integer(), nullable=False),
        sa.Column("n_degraded", sa.Integer(), nullable=False),
        sa.Column("n_served_edge", sa.Integer(), nullable=False),
        sa.Column("n_late", sa.Integer(), nullable=False),
        sa.Column("edge_latency_ms_p50", sa.Float(), nullable=True),
        sa.Column("edge_latency_ms_p95", sa.Float(), nullable=True),
        sa.Column("edge_latency_ms_p99", sa.Float(), nullable=True),
        sa.Column("edge_ttfb_ms_p50", sa.Float(), nullable=True),
        sa.Column("edge_ttfb_ms_p95", sa.Float(), nullable=True),
        sa.Column("edge_ttfb_ms_p99", sa.Float(), nullable=True),
        sa.Column("cloud_latency_ms_p50", sa.Float(), nullable=True),
        sa.Column("cloud_latency_ms_p95", sa.Float(), nullable=True),
        sa.Column("cloud_latency_ms_p99", sa.Float(), nullable=True),
        sa.Column("cloud_ttfb_ms_p50", sa.Float(), nullable=True),
        sa.Column("cloud_ttfb_ms_p95", sa.Float(), nullable=True),
        sa.Column("cloud_ttfb_ms_p99", sa.Float(), nullable=True),
        sa.Column("input_tokens_p50", sa.Float(), nullable=True),
        sa.Column("input_tokens_p95", sa.Float(), nullable=True),
        sa.Column("edge_cost", sa.Float(), nullable=False),
        sa.Column("cloud_cost", sa.Float(), nullable=False),
        sa.Column("baseline_cost", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["tasks.id"],
            name=op.f("fk_window_metrics_task_id_tasks"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["window_id"],
            ["windows.id"],
            name=op.f("fk_window_metrics_window_id_windows"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_window_metrics")),
        sa.UniqueConstraint(
            "task_id",
            "window_start",
            "bucket",
            name=op.f("uq_window_metrics_task_id_window_start_bucket"),
        ),
    )
    with op.batch_alter_table("window_metrics", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_window_metrics_window_id"), ["window_id"], unique=False
        )

    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("input_p95_baseline", sa.Float(), nullable=True))


def downgrade() -> None:

    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_column("input_p95_baseline")

    with op.batch_alter_table("window_metrics", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_window_metrics_window_id"))

    op.drop_table("window_metrics")
    with op.batch_alter_table("windows", schema=None) as batch_op:
        batch_op.drop_index("ix_windows_open")

    op.drop_table("windows")
    with op.batch_alter_table("alerts", schema=None) as batch_op:
        batch_op.drop_index(
            "uq_alerts_task_id_kind_active",
            postgresql_where=sa.text("state <> 'resolved'"),
            sqlite_where=sa.text("state <> 'resolved'"),
        )
        batch_op.drop_index("ix_alerts_state_opened_at")

    op.drop_table("alerts")
    op.drop_table("scan_marks")
