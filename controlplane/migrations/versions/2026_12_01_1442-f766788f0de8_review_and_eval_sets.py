"""review items, labels, skips, route-accuracy windows, eval items and runs; windows.review_sampled

Windows closed before this revision are marked sampled: review starts with the windows that
close from now on.

Revision ID: f766788f0de8
Revises: 451b9053db49
Create Date: 2026-12-01 14:42:24.323129
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "f766788f0de8"
down_revision: str | None = "451b9053db49"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "eval_items",
        sa.Column(
            "seq",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("item_id", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("layer", sa.String(length=16), nullable=False),
        sa.Column(
            "input",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column(
            "expected",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column(
            "edge_output",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column(
            "cloud_output",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column("bucket", sa.String(length=32), nullable=False),
        sa.Column("failure_class", sa.String(length=64), nullable=True),
        sa.Column(
            "tags",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "provenance",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("review_item_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name=op.f("fk_eval_items_task_id_tasks"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_eval_items")),
        sa.UniqueConstraint("item_id", "layer", name=op.f("uq_eval_items_item_id_layer")),
    )
    with op.batch_alter_table("eval_items", schema=None) as batch_op:
        batch_op.create_index(
            "ix_eval_items_task_id_layer_seq", ["task_id", "layer", "seq"], unique=False
        )

    op.create_table(
        "eval_runs",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("layer", sa.String(length=16), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("set_hash", sa.String(length=64), nullable=False),
        sa.Column("n_items", sa.Integer(), nullable=False),
        sa.Column("n_correct", sa.Integer(), nullable=False),
        sa.Column("accuracy", sa.Float(), nullable=True),
        sa.Column(
            "per_bucket",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name=op.f("fk_eval_runs_task_id_tasks"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_eval_runs")),
    )
    with op.batch_alter_table("eval_runs", schema=None) as batch_op:
        batch_op.create_index("ix_eval_runs_task_id_model", ["task_id", "model"], unique=False)

    op.create_table(
        "route_acc_windows",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("window_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("window_end", sa.DateTime(timezone=True), nullable=False),
        sa.Column("n_labels", sa.Integer(), nullable=False),
        sa.Column("n_unclear", sa.Integer(), nullable=False),
        sa.Column("estimate", sa.Float(), nullable=True),
        sa.Column("n_effective", sa.Float(), nullable=False),
        sa.Column("low", sa.Float(), nullable=True),
        sa.Column("high", sa.Float(), nullable=True),
        sa.Column("missed_offload", sa.Float(), nullable=True),
        sa.Column("wrong_offload", sa.Float(), nullable=True),
        sa.Column(
            "failure_classes",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("config_version", sa.Integer(), nullable=False),
        sa.Column("computed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["tasks.id"],
            name=op.f("fk_route_acc_windows_task_id_tasks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_route_acc_windows")),
        sa.UniqueConstraint(
            "task_id", "window_start", name=op.f("uq_route_acc_windows_task_id_window_start")
        ),
    )
    op.create_table(
        "review_items",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("result_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("request_id", sa.String(length=200), nullable=False),
        sa.Column("result_ts", sa.DateTime(timezone=True), nullable=False),
        sa.Column("window_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("bucket", sa.String(length=32), nullable=False),
        sa.Column("input_tokens", sa.Integer(), nullable=False),
        sa.Column("decision", sa.String(length=8), nullable=False),
        sa.Column("served", sa.String(length=8), nullable=False),
        sa.Column("flag_version", sa.Integer(), nullable=True),
        sa.Column("config_version", sa.Integer(), nullable=False),
        sa.Column("comparator", sa.String(length=32), nullable=False),
        sa.Column("comparator_version", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.String(length=8), nullable=True),
        sa.Column("edge_error", sa.String(length=64), nullable=True),
        sa.Column("edge_confidence", sa.Float(), nullable=True),
        sa.Column("edge_model", sa.String(length=200), nullable=True),
        sa.Column("cloud_model", sa.String(length=200), nullable=True),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("reason", sa.String(length=16), nullable=False),
        sa.Column("layer", sa.String(length=16), nullable=False),
        sa.Column("inclusion_probability", sa.Float(), nullable=False),
        sa.Column("a_is_edge", sa.Boolean(), nullable=False),
        sa.Column("policy", sa.String(length=16), nullable=False),
        sa.Column(
            "input",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column(
            "edge_output",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column(
            "cloud_output",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column(
            "diff",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column("edge_error_message", sa.Text(), nullable=True),
        sa.Column(
            "provenance",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column("reviews_needed", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=8), nullable=False),
        sa.Column("claimed_by", sa.String(length=200), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("done_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["tasks.id"],
            name=op.f("fk_review_items_task_id_tasks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_review_items")),
        sa.UniqueConstraint(
            "task_id", "request_id", name=op.f("uq_review_items_task_id_request_id")
        ),
    )
    with op.batch_alter_table("review_items", schema=None) as batch_op:
        batch_op.create_index("ix_review_items_claim", ["task_id", "state", "id"], unique=False)
        batch_op.create_index(batch_op.f("ix_review_items_result_id"), ["result_id"], unique=False)
        batch_op.create_index(
            "ix_review_items_task_id_result_ts", ["task_id", "result_ts"], unique=False
        )

    op.create_table(
        "review_labels",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("item_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("reviewer", sa.String(length=200), nullable=False),
        sa.Column("verdict", sa.String(length=16), nullable=False),
        sa.Column("resolved", sa.String(length=16), nullable=False),
        sa.Column("failure_class", sa.String(length=64), nullable=True),
        sa.Column(
            "corrected",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["item_id"],
            ["review_items.id"],
            name=op.f("fk_review_labels_item_id_review_items"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["tasks.id"],
            name=op.f("fk_review_labels_task_id_tasks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_review_labels")),
    )
    with op.batch_alter_table("review_labels", schema=None) as batch_op:
        batch_op.create_index(
            "ix_review_labels_item_id_reviewer", ["item_id", "reviewer"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_review_labels_task_id"), ["task_id"], unique=False)

    op.create_table(
        "review_skips",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("item_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("reviewer", sa.String(length=200), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["item_id"],
            ["review_items.id"],
            name=op.f("fk_review_skips_item_id_review_items"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_review_skips")),
    )
    with op.batch_alter_table("review_skips", schema=None) as batch_op:
        batch_op.create_index(
            "ix_review_skips_item_id_reviewer", ["item_id", "reviewer"], unique=False
        )

    with op.batch_alter_table("windows", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("review_sampled", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    op.execute(sa.text("UPDATE windows SET review_sampled = closed_at IS NOT NULL"))


def downgrade() -> None:
    with op.batch_alter_table("windows", schema=None) as batch_op:
        batch_op.drop_column("review_sampled")

    with op.batch_alter_table("review_skips", schema=None) as batch_op:
        batch_op.drop_index("ix_review_skips_item_id_reviewer")

    op.drop_table("review_skips")
    with op.batch_alter_table("review_labels", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_review_labels_task_id"))
        batch_op.drop_index("ix_review_labels_item_id_reviewer")

    op.drop_table("review_labels")
    with op.batch_alter_table("review_items", schema=None) as batch_op:
        batch_op.drop_index("ix_review_items_task_id_result_ts")
        batch_op.drop_index(batch_op.f("ix_review_items_result_id"))
        batch_op.drop_index("ix_review_items_claim")

    op.drop_table("review_items")
    op.drop_table("route_acc_windows")
    with op.batch_alter_table("eval_runs", schema=None) as batch_op:
        batch_op.drop_index("ix_eval_runs_task_id_model")

    op.drop_table("eval_runs")
    with op.batch_alter_table("eval_items", schema=None) as batch_op:
        batch_op.drop_index("ix_eval_items_task_id_layer_seq")

    op.drop_table("eval_items")
