"""Routing flags: one document per task, the global revision and kill switch; tasks.canary_step.

Revision ID: 05562641bc7a
Revises: f7aa4bb98288
Create Date: 2026-11-30 06:36:58.174897
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "05562641bc7a"
down_revision: str | None = "f7aa4bb98288"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "flag_state",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("revision", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("killed", sa.Boolean(), nullable=False),
        sa.Column("kill_reason", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_flag_state")),
    )
    op.create_table(
        "flags",
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column(
            "document",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name=op.f("fk_flags_task_id_tasks"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("task_id", name=op.f("pk_flags")),
    )
    flag_state = sa.table(
        "flag_state",
        sa.column("id", sa.Integer),
        sa.column("revision", sa.Integer),
        sa.column("killed", sa.Boolean),
    )
    op.bulk_insert(flag_state, [{"id": 1, "revision": 0, "killed": False}])
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("canary_step", sa.Integer(), server_default="0", nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_column("canary_step")

    op.drop_table("flags")
    op.drop_table("flag_state")
