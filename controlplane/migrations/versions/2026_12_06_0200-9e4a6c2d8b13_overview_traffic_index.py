"""overview traffic index: a task's windows with results, found without the empty ones

The Overview shows each task's last window with results (a quiet task keeps its figures)
and sums the day before it for its sparklines. A partial index of the `all` metric rows
that count results, by task and window start, finds the last one in one probe however
many empty windows the scheduler closed since; on PostgreSQL it includes the counts the
sparklines sum, so they are read from the index alone.

Revision ID: 9e4a6c2d8b13
Revises: 3188222e57c7
Create Date: 2026-12-06 02:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "9e4a6c2d8b13"
down_revision: str | None = "3188222e57c7"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# As controlplane.models.metrics.WITH_RESULTS: written here so the migration never changes.
WITH_RESULTS = "bucket = 'all' AND n_results > 0"


def upgrade() -> None:
    op.create_index(
        "ix_window_metrics_with_results",
        "window_metrics",
        ["task_id", "window_start"],
        postgresql_include=["n_results", "n_pairs", "n_agree", "n_served_edge"],
        postgresql_where=sa.text(WITH_RESULTS),
        sqlite_where=sa.text(WITH_RESULTS),
    )


def downgrade() -> None:
    op.drop_index("ix_window_metrics_with_results", table_name="window_metrics")
