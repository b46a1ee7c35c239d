"""regression first: review items get a queue priority

Stored configs gain the review section's two new fields at their defaults
(`regression_items: 100`, `guidelines: null`) and their hash is recomputed, so an identical
config still answers with its version.

A rollback's regression sample is handed out before any other item, the breaching cell's
results first (controlplane.models.review.PRIORITY_*). Items already in the regression
layer get the regression priority; the claim indexes order by priority, then id. Eval
items are indexed by their review item, which each pass asks of labelled regression items.

Revision ID: 7b3e9d1c4f28
Revises: 5d8e2f7a9c10
Create Date: 2026-12-05 06:00:00.000000
"""

import hashlib
import json
from collections.abc import Sequence

import orjson
import sqlalchemy as sa
from alembic import op

revision: str = "7b3e9d1c4f28"
down_revision: str | None = "5d8e2f7a9c10"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# As controlplane.models.review: written here so the migration never changes with them.
PRIORITY_REGRESSION = 1
PRIORITY_OTHER = 2
# As controlplane.catalog.schemas.ReviewConfig.
REVIEW_DEFAULTS = {"regression_items": 100, "guidelines": None}


def _hash(document: dict) -> str:
    # As controlplane.catalog.schemas.config_hash.
    return hashlib.sha256(orjson.dumps(document, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _rewrite_configs(add: bool) -> None:
    connection = op.get_bind()
    versions = sa.table(
        "task_config_versions",
        sa.column("id", sa.Integer),
        sa.column("config", sa.JSON),
        sa.column("config_hash", sa.String),
    )
    for row_id, config in connection.execute(sa.select(versions.c.id, versions.c.config)):
        if isinstance(config, str):
            config = json.loads(config)
        review = dict(config.get("review") or {})
        if add:
            review = {**REVIEW_DEFAULTS, **review}
        else:
            for key in REVIEW_DEFAULTS:
                review.pop(key, None)
        config = {**config, "review": review}
        connection.execute(
            sa.update(versions)
            .where(versions.c.id == row_id)
            .values(config=config, config_hash=_hash(config))
        )


def upgrade() -> None:
    # Native ADD COLUMN on both databases (a batch copy of the table on SQLite is not
    # needed for a column with a server default).
    op.add_column(
        "review_items",
        sa.Column(
            "priority", sa.SmallInteger(), nullable=False, server_default=str(PRIORITY_OTHER)
        ),
    )
    op.execute(
        sa.text("UPDATE review_items SET priority = :p WHERE layer = 'regression'").bindparams(
            p=PRIORITY_REGRESSION
        )
    )
    op.drop_index("ix_review_items_claim", table_name="review_items")
    op.create_index("ix_review_items_claim", "review_items", ["task_id", "state", "priority", "id"])
    op.create_index("ix_review_items_claim_any", "review_items", ["state", "priority", "id"])
    # Each pass puts labelled regression items into their eval set: is one there yet?
    op.create_index("ix_eval_items_review_item_id", "eval_items", ["review_item_id"])
    _rewrite_configs(add=True)


def downgrade() -> None:
    _rewrite_configs(add=False)
    op.drop_index("ix_eval_items_review_item_id", table_name="eval_items")
    op.drop_index("ix_review_items_claim_any", table_name="review_items")
    op.drop_index("ix_review_items_claim", table_name="review_items")
    op.create_index("ix_review_items_claim", "review_items", ["task_id", "state", "id"])
    op.drop_column("review_items", "priority")
