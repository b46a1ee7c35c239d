"""failing evaluations: a task whose rollout evaluation keeps failing goes to the cloud

Each pass evaluates the rollout rules of a task whose window closed. An evaluation that
raised was logged and retried, while the task's flag went on routing to the edge with no
rule judging it. A task whose evaluations fail now has a row saying since when; past a
grace the pass sends its flag to the cloud, and the first evaluation that succeeds deletes
the row and publishes its stage's flag again. A table of its own: `tasks` is not rewritten
(and on SQLite never copied by batch mode, whose drop of `tasks` would cascade).

Revision ID: 8c1f4d2a9e67
Revises: 5d3b8e91c2a4
Create Date: 2026-12-10 02:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "8c1f4d2a9e67"
down_revision: str | None = "5d3b8e91c2a4"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "failing_evaluations",
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("grounded_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["tasks.id"],
            name=op.f("fk_failing_evaluations_task_id_tasks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("task_id", name=op.f("pk_failing_evaluations")),
    )


def downgrade() -> None:
    op.drop_table("failing_evaluations")
