"""grading: repeat pairs on results, their counts on window metrics, task_grades

Results gain the repeat pair's outcome, source, differing fields and cost, the input's
keyed hash and the cloud output's fingerprint (free repeats), an index on
(input_hash, ts) and a partial one on the repeat pairs' (task_id, ts). Window metrics
gain the repeat counts, the per-field differences and the sum of input tokens. `task_grades` keeps one grade per task and day.

Every new column is nullable or has a server default, so existing rows stay valid: a
window computed before this revision reads as having no repeat pairs.

Revision ID: 3c1f0a9e7b21
Revises: 8a9bcad40b32
Create Date: 2026-12-05 01:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "3c1f0a9e7b21"
down_revision: str | None = "8a9bcad40b32"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")

RESULT_COLUMNS = (
    ("repeat_outcome", lambda: sa.String(length=8)),
    ("repeat_source", lambda: sa.String(length=9)),
    ("repeat_diff", lambda: JSON),
    ("repeat_cost", sa.Float),
    ("input_hash", lambda: sa.String(length=32)),
    ("cloud_print", lambda: JSON),
)


def upgrade() -> None:
    with op.batch_alter_table("results") as batch_op:
        for name, kind in RESULT_COLUMNS:
            batch_op.add_column(sa.Column(name, kind(), nullable=True))
    # On PostgreSQL an index on the partitioned parent is built on every day's partition,
    # and each new day's partition gets it too.
    # The hash leads, so the planner never takes this index for a task's time range.
    op.create_index("ix_results_input_hash_ts", "results", ["input_hash", "ts"])
    # A window's repeat pairs, read without reading the whole window.
    op.create_index(
        "ix_results_task_id_ts_repeats",
        "results",
        ["task_id", "ts"],
        postgresql_where=sa.text("repeat_outcome IS NOT NULL"),
        sqlite_where=sa.text("repeat_outcome IS NOT NULL"),
    )
    with op.batch_alter_table("window_metrics") as batch_op:
        for name in ("n_repeat_pairs", "n_repeat_agree", "n_repeat_invalid"):
            batch_op.add_column(sa.Column(name, sa.Integer(), server_default="0", nullable=False))
        batch_op.add_column(sa.Column("repeat_diffs", JSON, nullable=True))
        batch_op.add_column(
            sa.Column("input_tokens_sum", sa.Float(), server_default="0", nullable=False)
        )
    op.create_table(
        "task_grades",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("tier", sa.String(length=16), nullable=False),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column("config_version", sa.Integer(), nullable=False),
        sa.Column("computed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("document", JSON, nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name=op.f("fk_task_grades_task_id_tasks"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_task_grades")),
        sa.UniqueConstraint("task_id", "day", name=op.f("uq_task_grades_task_id_day")),
    )


def downgrade() -> None:
    op.drop_table("task_grades")
    with op.batch_alter_table("window_metrics") as batch_op:
        for name in (
            "input_tokens_sum",
            "repeat_diffs",
            "n_repeat_invalid",
            "n_repeat_agree",
            "n_repeat_pairs",
        ):
            batch_op.drop_column(name)
    op.drop_index("ix_results_task_id_ts_repeats", table_name="results")
    op.drop_index("ix_results_input_hash_ts", table_name="results")
    with op.batch_alter_table("results") as batch_op:
        for name, _ in reversed(RESULT_COLUMNS):
            batch_op.drop_column(name)
