"""eval runs keep the comparator they were scored with

A run on the current regression set lifted a block even after the task's comparator
changed (the set's hash covers its items only): a run scored under the comparator that
no longer holds counted. Each run now keeps the digest of its comparator spec, and is
current only under it. Runs stored before this revision have none and are never current:
the gate asks for a run again (when in doubt, the blocked model stays blocked).

Revision ID: 7b2e5d9c4a13
Revises: 3e7a9c5b1d28
Create Date: 2026-12-12 01:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "7b2e5d9c4a13"
down_revision: str | None = "3e7a9c5b1d28"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable, no default: PostgreSQL adds it without rewriting the table.
    with op.batch_alter_table("eval_runs") as batch:
        batch.add_column(sa.Column("comparator", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("eval_runs") as batch:
        batch.drop_column("comparator")
