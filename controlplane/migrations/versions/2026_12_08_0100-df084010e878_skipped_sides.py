"""skipped sides: results keep the sides the router did not run, and why

A router's shadow_compare names under `skipped` a side it did not run (its threads were all
busy, its event loop shut down) with the reason. The API used to read past the field and
keep nothing of it; results now keep it in a nullable JSON column, so existing rows stay
valid (NULL: no side was named). Adding a nullable column without a default rewrites no
row: on PostgreSQL it is a change to the catalog of the partitioned parent and every day's
partition.

Revision ID: df084010e878
Revises: b4d1e7f3a2c9
Create Date: 2026-12-08 01:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "df084010e878"
down_revision: str | None = "b4d1e7f3a2c9"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("results") as batch_op:
        batch_op.add_column(sa.Column("skipped", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("results") as batch_op:
        batch_op.drop_column("skipped")
