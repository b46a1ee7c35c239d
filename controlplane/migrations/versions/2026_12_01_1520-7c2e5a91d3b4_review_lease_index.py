"""review_items: a partial index on claimed_by, so a claim finds the item its reviewer
already holds without reading the queue.

Revision ID: 7c2e5a91d3b4
Revises: f766788f0de8
Create Date: 2026-12-01 15:20:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "7c2e5a91d3b4"
down_revision: str | None = "f766788f0de8"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("review_items", schema=None) as batch_op:
        batch_op.create_index(
            "ix_review_items_claimed_by",
            ["claimed_by"],
            unique=False,
            postgresql_where=sa.text("claimed_by IS NOT NULL"),
            sqlite_where=sa.text("claimed_by IS NOT NULL"),
        )


def downgrade() -> None:
    with op.batch_alter_table("review_items", schema=None) as batch_op:
        batch_op.drop_index(
            "ix_review_items_claimed_by",
            postgresql_where=sa.text("claimed_by IS NOT NULL"),
            sqlite_where=sa.text("claimed_by IS NOT NULL"),
        )
