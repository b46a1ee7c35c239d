"""scan mark settled: the window planner rescans results until their writers have ended

The planner finds windows with new results by reading `results` past an id. It read from
the id the scan before the last one had reached, which missed a batch whose ingest
transaction drew its ids before one pass and committed after the next (a write waiting on a
lock): its results were stored and counted in no window. On PostgreSQL the mark now keeps
the snapshot's xmax of the scan that reached `last_id`; once every transaction that was in
progress then has ended (the current snapshot's xmin has passed it), `last_id` is settled
and the next scans start there. A nullable column: no row is rewritten.

Revision ID: 5d3b8e91c2a4
Revises: 6a2f9c1e4b70
Create Date: 2026-12-10 01:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "5d3b8e91c2a4"
down_revision: str | None = "6a2f9c1e4b70"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("scan_marks") as batch_op:
        batch_op.add_column(sa.Column("last_xmax", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("scan_marks") as batch_op:
        batch_op.drop_column("last_xmax")
