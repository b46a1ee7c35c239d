"""config holds: a task whose stored config does not parse, its flag held on the cloud

A pass, a lift or a rollback that finds a task's current config unreadable holds its flag
on the cloud and announces it (flag.grounded); the apply that fixes it announces the end
(flag.ungrounded). A row says the hold has been announced and not yet ended: one key
lookup, where reading it back from the audit log scanned the task's entries (every label
saved among them) under the flag-state lock. A table of its own, as failing_evaluations:
`tasks` is not rewritten.

Revision ID: 3e7a9c5b1d28
Revises: 8c1f4d2a9e67
Create Date: 2026-12-11 01:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "3e7a9c5b1d28"
down_revision: str | None = "8c1f4d2a9e67"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "config_holds",
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["tasks.id"],
            name=op.f("fk_config_holds_task_id_tasks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("task_id", name=op.f("pk_config_holds")),
    )


def downgrade() -> None:
    op.drop_table("config_holds")
