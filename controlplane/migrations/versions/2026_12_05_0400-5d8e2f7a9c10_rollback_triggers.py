"""rollback triggers: input-length histograms on windows, the input baseline and the
re-grade mark on tasks, and the input-shift alert in stored configs

Window metrics gain `input_hist` (counts per fixed log-scale token bin, on `all`) and
`n_over_cap`. Tasks lose the p95 drift alert's `input_p95_baseline` and gain
`input_baseline`, `needs_regrade` and `shifted_at`. Stored configs name the input-shift
alert's line (`alerts.input_shift`, a population stability index) where they named the
p95 drift (`alerts.input_p95_drift`): one mechanism for input length; their hash is
recomputed so an identical config still answers with its version.

Revision ID: 5d8e2f7a9c10
Revises: 3c1f0a9e7b21
Create Date: 2026-12-05 04:00:00.000000
"""

import hashlib
import json
from collections.abc import Sequence

import orjson
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "5d8e2f7a9c10"
down_revision: str | None = "3c1f0a9e7b21"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
# The input-shift alert's default line (controlplane.catalog.schemas.AlertsConfig).
INPUT_SHIFT_ALERT = 0.1


def _hash(document: dict) -> str:
    # As controlplane.catalog.schemas.config_hash.
    return hashlib.sha256(orjson.dumps(document, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _rewrite_configs(rename: tuple[str, str], value: float) -> None:
    connection = op.get_bind()
    versions = sa.table(
        "task_config_versions",
        sa.column("id", sa.Integer),
        sa.column("config", sa.JSON),
        sa.column("config_hash", sa.String),
    )
    old, new = rename
    for row_id, config in connection.execute(sa.select(versions.c.id, versions.c.config)):
        if isinstance(config, str):
            config = json.loads(config)
        alerts = dict(config.get("alerts") or {})
        if old not in alerts and new in alerts:
            continue
        alerts.pop(old, None)
        alerts[new] = value
        config = {**config, "alerts": alerts}
        connection.execute(
            sa.update(versions)
            .where(versions.c.id == row_id)
            .values(config=config, config_hash=_hash(config))
        )


def _drop(table: str, column: str) -> None:
    """Drop a column in place. On SQLite (3.35+ drops natively) never by batch mode's copy
    of the table: dropping `tasks` to rename the copy would cascade to every row that
    references a task (flags, flag history, decisions)."""
    if op.get_bind().dialect.name == "sqlite":
        op.execute(sa.text(f"ALTER TABLE {table} DROP COLUMN {column}"))
    else:
        op.drop_column(table, column)


def upgrade() -> None:
    # Added in place (never a batch copy, see _drop): nullable or with a server default.
    op.add_column("window_metrics", sa.Column("input_hist", JSON, nullable=True))
    op.add_column("window_metrics", sa.Column("n_over_cap", sa.Integer(), nullable=True))
    _drop("tasks", "input_p95_baseline")
    op.add_column("tasks", sa.Column("input_baseline", JSON, nullable=True))
    op.add_column(
        "tasks", sa.Column("needs_regrade", sa.Boolean(), server_default=sa.false(), nullable=False)
    )
    op.add_column("tasks", sa.Column("shifted_at", sa.DateTime(timezone=True), nullable=True))
    _rewrite_configs(("input_p95_drift", "input_shift"), INPUT_SHIFT_ALERT)


def downgrade() -> None:
    _rewrite_configs(("input_shift", "input_p95_drift"), 0.3)
    for column in ("shifted_at", "needs_regrade", "input_baseline"):
        _drop("tasks", column)
    op.add_column("tasks", sa.Column("input_p95_baseline", sa.Float(), nullable=True))
    for column in ("n_over_cap", "input_hist"):
        _drop("window_metrics", column)
