"""dashboard sessions: a signed-in browser's session, kept on the server

A browser that signs in to the dashboard holds a random token in an HttpOnly cookie; the
table keeps the token's SHA-256 (never the token, never the key), the key it signed in
with, and when the session expires or was ended by signing out. Deleting a key deletes its
sessions.

Revision ID: 3188222e57c7
Revises: 7b3e9d1c4f28
Create Date: 2026-12-06 01:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "3188222e57c7"
down_revision: str | None = "7b3e9d1c4f28"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "dashboard_sessions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("key_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["key_id"],
            ["api_keys.id"],
            name=op.f("fk_dashboard_sessions_key_id_api_keys"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dashboard_sessions")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_dashboard_sessions_token_hash")),
    )
    op.create_index("ix_dashboard_sessions_key_id", "dashboard_sessions", ["key_id"])


def downgrade() -> None:
    op.drop_index("ix_dashboard_sessions_key_id", table_name="dashboard_sessions")
    op.drop_table("dashboard_sessions")
