"""results.sticky_bucket; server_secrets (the key that hashes session and user ids).

Revision ID: 042dea6e0001
Revises: 1aa8762a19a7
Create Date: 2026-12-01 08:50:17.024289
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "042dea6e0001"
down_revision: str | None = "1aa8762a19a7"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "server_secrets",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.String(length=128), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_server_secrets")),
    )
    # Rows stored before this revision keep a NULL bucket (and the ids they were stored with).
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.add_column(sa.Column("sticky_bucket", sa.SmallInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.drop_column("sticky_bucket")

    op.drop_table("server_secrets")
