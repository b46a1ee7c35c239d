"""eval layer digests: each layer's content hash kept, not recomputed on every read

`GET /v1/evalsets`, the runs' `current` and the gate hashed each layer's export by reading
every item of it on every call (seconds for a boundary layer of 50,000 items, which only
grows). The hash and count are now kept per (task, layer) by the transaction that changes
the layer; a layer made before this revision has no row until a read or a write makes one.

Revision ID: 2d8f6a1c3e95
Revises: 7b2e5d9c4a13
Create Date: 2026-12-12 02:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "2d8f6a1c3e95"
down_revision: str | None = "7b2e5d9c4a13"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "eval_layer_digests",
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("layer", sa.String(length=16), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=True),
        sa.Column("n_items", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["tasks.id"],
            name=op.f("fk_eval_layer_digests_task_id_tasks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("task_id", "layer", name=op.f("pk_eval_layer_digests")),
    )


def downgrade() -> None:
    op.drop_table("eval_layer_digests")
