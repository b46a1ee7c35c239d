"""initial schema

Revision ID: d793772727ee
Revises:
Create Date: 2026-11-30 04:08:27.553377
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "d793772727ee"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:

    op.create_table(
        "api_keys",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column(
            "scopes",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_api_keys_key_hash")),
        sa.UniqueConstraint("name", name=op.f("uq_api_keys_name")),
    )
    op.create_table(
        "audit_log",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("task", sa.String(length=100), nullable=True),
        sa.Column(
            "details",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_log")),
    )
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.create_index("ix_audit_log_task_created_at", ["task", "created_at"], unique=False)

    op.create_table(
        "tasks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("stage", sa.String(length=16), nullable=False),
        sa.Column("config_version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tasks")),
        sa.UniqueConstraint("name", name=op.f("uq_tasks_name")),
    )
    op.create_table(
        "results",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("request_id", sa.String(length=200), nullable=False),
        sa.Column("ts", sa.DateTime(timezone=True), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("session_id", sa.String(length=200), nullable=True),
        sa.Column("user_id", sa.String(length=200), nullable=True),
        sa.Column("input_tokens", sa.Integer(), nullable=False),
        sa.Column("decision", sa.String(length=8), nullable=False),
        sa.Column("served", sa.String(length=8), nullable=False),
        sa.Column("degraded", sa.Boolean(), nullable=False),
        sa.Column("degrade_reason", sa.String(length=200), nullable=True),
        sa.Column("flag_version", sa.Integer(), nullable=True),
        sa.Column(
            "input_segments",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column("config_version", sa.Integer(), nullable=False),
        sa.Column("bucket", sa.String(length=32), nullable=False),
        sa.Column("comparator", sa.String(length=32), nullable=False),
        sa.Column("comparator_version", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.String(length=8), nullable=True),
        sa.Column("edge_ran", sa.Boolean(), nullable=False),
        sa.Column("edge_error", sa.String(length=64), nullable=True),
        sa.Column("edge_latency_ms", sa.Float(), nullable=True),
        sa.Column("edge_ttfb_ms", sa.Float(), nullable=True),
        sa.Column("edge_confidence", sa.Float(), nullable=True),
        sa.Column("edge_valid", sa.Boolean(), nullable=True),
        sa.Column("edge_model", sa.String(length=200), nullable=True),
        sa.Column("edge_input_tokens", sa.Integer(), nullable=True),
        sa.Column("edge_output_tokens", sa.Integer(), nullable=True),
        sa.Column("edge_cost", sa.Float(), nullable=True),
        sa.Column("cloud_ran", sa.Boolean(), nullable=False),
        sa.Column("cloud_error", sa.String(length=64), nullable=True),
        sa.Column("cloud_latency_ms", sa.Float(), nullable=True),
        sa.Column("cloud_ttfb_ms", sa.Float(), nullable=True),
        sa.Column("cloud_model", sa.String(length=200), nullable=True),
        sa.Column("cloud_input_tokens", sa.Integer(), nullable=True),
        sa.Column("cloud_output_tokens", sa.Integer(), nullable=True),
        sa.Column("cloud_cost", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name=op.f("fk_results_task_id_tasks"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_results")),
        sa.UniqueConstraint("task_id", "request_id", name=op.f("uq_results_task_id_request_id")),
    )
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.create_index("ix_results_task_id_ts", ["task_id", "ts"], unique=False)

    op.create_table(
        "task_config_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column(
            "config",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("config_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(length=200), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["tasks.id"],
            name=op.f("fk_task_config_versions_task_id_tasks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_task_config_versions")),
        sa.UniqueConstraint(
            "task_id", "version", name=op.f("uq_task_config_versions_task_id_version")
        ),
    )
    op.create_table(
        "payloads",
        sa.Column(
            "result_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column("policy", sa.String(length=16), nullable=False),
        sa.Column("keep_probability", sa.Float(), nullable=False),
        sa.Column(
            "input",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column(
            "edge_output",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column(
            "cloud_output",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column(
            "diff",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column("edge_error_message", sa.Text(), nullable=True),
        sa.Column("cloud_error_message", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["result_id"],
            ["results.id"],
            name=op.f("fk_payloads_result_id_results"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("result_id", name=op.f("pk_payloads")),
    )


def downgrade() -> None:

    op.drop_table("payloads")
    op.drop_table("task_config_versions")
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.drop_index("ix_results_task_id_ts")

    op.drop_table("results")
    op.drop_table("tasks")
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.drop_index("ix_audit_log_task_created_at")

    op.drop_table("audit_log")
    op.drop_table("api_keys")
