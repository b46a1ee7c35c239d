"""flag_history: every version of every flag with its cause; backfilled from `flags`.

Revision ID: 451b9053db49
Revises: 5e1d0b0a7001
Create Date: 2026-12-01 11:48:03.516897
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "451b9053db49"
down_revision: str | None = "5e1d0b0a7001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIGINT = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
# controlplane.rollout.flags.ROUTING_FIELDS when this revision was written.
ROUTING_FIELDS = (
    "stage",
    "edge_percent",
    "sticky_by",
    "max_input_tokens",
    "shadow_rate",
    "killed",
    "default_route",
)


def upgrade() -> None:
    op.create_table(
        "flag_history",
        sa.Column("id", BIGINT, autoincrement=True, nullable=False),
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("revision", BIGINT, nullable=True),
        sa.Column("fields", JSON, nullable=False),
        sa.Column("cause", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["tasks.id"],
            name=op.f("fk_flag_history_task_id_tasks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_flag_history")),
        sa.UniqueConstraint("task_id", "version", name=op.f("uq_flag_history_task_id_version")),
    )
    # The current version of each flag is the only one known: copy it, with its reason as
    # the cause. Its revision was never recorded, so it stays null.
    flags = sa.table(
        "flags",
        sa.column("task_id", sa.Integer),
        sa.column("version", sa.Integer),
        sa.column("document", JSON),
        sa.column("updated_at", sa.DateTime(timezone=True)),
        sa.column("reason", sa.Text),
    )
    history = sa.table(
        "flag_history",
        sa.column("task_id", sa.Integer),
        sa.column("version", sa.Integer),
        sa.column("revision", BIGINT),
        sa.column("fields", JSON),
        sa.column("cause", sa.Text),
        sa.column("created_at", sa.DateTime(timezone=True)),
    )
    rows = op.get_bind().execute(
        sa.select(
            flags.c.task_id, flags.c.version, flags.c.document, flags.c.updated_at, flags.c.reason
        ).order_by(flags.c.task_id)
    )
    copied = [
        {
            "task_id": row.task_id,
            "version": row.version,
            "revision": None,
            "fields": {name: (row.document or {}).get(name) for name in ROUTING_FIELDS},
            "cause": row.reason,
            "created_at": row.updated_at,
        }
        for row in rows
    ]
    if copied:
        op.bulk_insert(history, copied)


def downgrade() -> None:
    op.drop_table("flag_history")
