"""Decisions, blocked models, tasks.stage_changed_at.

Revision ID: 1aa8762a19a7
Revises: 05562641bc7a
Create Date: 2026-11-30 06:39:41.972174
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "1aa8762a19a7"
down_revision: str | None = "05562641bc7a"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:

    op.create_table(
        "decisions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.Integer(), nullable=True),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("rule", sa.String(length=200), nullable=True),
        sa.Column("bucket", sa.String(length=32), nullable=True),
        sa.Column("stage_before", sa.String(length=16), nullable=True),
        sa.Column("stage_after", sa.String(length=16), nullable=True),
        sa.Column("flag_version_before", sa.Integer(), nullable=True),
        sa.Column("flag_version_after", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "evidence",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("dedupe_key", sa.String(length=300), nullable=True),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name=op.f("fk_decisions_task_id_tasks"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_decisions")),
        sa.UniqueConstraint("dedupe_key", name=op.f("uq_decisions_dedupe_key")),
    )
    with op.batch_alter_table("decisions", schema=None) as batch_op:
        batch_op.create_index(
            "ix_decisions_task_id_created_at", ["task_id", "created_at"], unique=False
        )

    op.create_table(
        "blocked_models",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("decision_id", sa.Integer(), nullable=True),
        sa.Column("blocked_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("lifted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lifted_by", sa.String(length=200), nullable=True),
        sa.Column("lift_reason", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["decision_id"], ["decisions.id"], name=op.f("fk_blocked_models_decision_id_decisions")
        ),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["tasks.id"],
            name=op.f("fk_blocked_models_task_id_tasks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_blocked_models")),
    )
    with op.batch_alter_table("blocked_models", schema=None) as batch_op:
        batch_op.create_index(
            "uq_blocked_models_task_id_model_active",
            ["task_id", "model"],
            unique=True,
            postgresql_where=sa.text("lifted_at IS NULL"),
            sqlite_where=sa.text("lifted_at IS NULL"),
        )

    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("stage_changed_at", sa.DateTime(timezone=True), nullable=True)
        )


def downgrade() -> None:

    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_column("stage_changed_at")

    with op.batch_alter_table("blocked_models", schema=None) as batch_op:
        batch_op.drop_index(
            "uq_blocked_models_task_id_model_active",
            postgresql_where=sa.text("lifted_at IS NULL"),
            sqlite_where=sa.text("lifted_at IS NULL"),
        )

    op.drop_table("blocked_models")
    with op.batch_alter_table("decisions", schema=None) as batch_op:
        batch_op.drop_index("ix_decisions_task_id_created_at")

    op.drop_table("decisions")
