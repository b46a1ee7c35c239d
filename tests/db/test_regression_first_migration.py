"""The regression-first migration (7b3e9d1c4f28) on data: review items get a queue
priority (the regression layer's `1`, every other item `2`) and the claim indexes order
by it; stored configs gain the review section's `regression_items` and `guidelines` at
their defaults with their hash recomputed, so applying the same config again still answers
with its version; the way down takes both away again."""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa

from controlplane.catalog.schemas import REGRESSION_ITEMS, config_hash
from controlplane.db import get_engine
from controlplane.models.review import PRIORITY_OTHER, PRIORITY_REGRESSION
from controlplane.rollout.configs import apply_tasks
from tests.conftest import INVOICE_TASK, TICKET_TASK
from tests.db.migrating import migrate_to
from tests.review.queuedata import item_row

BEFORE = "5d8e2f7a9c10"
REVISION = "7b3e9d1c4f28"
CLAIM_INDEXES = ("ix_review_items_claim", "ix_review_items_claim_any")
JSON_COLUMNS = {"input", "diff", "provenance", "edge_output", "cloud_output"}


def _configs(url: str) -> dict[tuple[int, int], tuple[dict[str, Any], str]]:
    """Every stored config version: (task id, version) → (document, stored hash)."""
    with get_engine(url).connect() as conn:
        rows = conn.execute(
            sa.text("SELECT task_id, version, config, config_hash FROM task_config_versions")
        )
        return {
            (t, v): (json.loads(c) if isinstance(c, str) else dict(c), h) for t, v, c, h in rows
        }


def _claim_indexes(url: str) -> dict[str, list[str]]:
    with get_engine(url).connect() as conn:
        found = sa.inspect(conn).get_indexes("review_items")
    return {i["name"]: list(i["column_names"]) for i in found if i["name"] in CLAIM_INDEXES}


@pytest.mark.fresh_db  # migrates down and up
def test_review_items_get_their_priority_and_configs_the_review_defaults(db_url: str) -> None:
    engine = get_engine(db_url)
    apply_tasks(engine, [TICKET_TASK, INVOICE_TASK], actor="test")

    # Down to the revision before: configs lose the fields, review items their priority.
    migrate_to(db_url, BEFORE, down=True)
    for document, digest in _configs(db_url).values():
        assert set(document["review"]) & {"regression_items", "guidelines"} == set()
        assert digest == config_hash(document)
    assert _claim_indexes(db_url) == {"ix_review_items_claim": ["task_id", "state", "id"]}
    # Items as the code of that revision queued them: one of a rollback, one sampled.
    with get_engine(db_url).begin() as conn:
        task_id = conn.execute(
            sa.text("SELECT id FROM tasks WHERE name = 'ticket_classify'")
        ).scalar_one()
        for n, layer in enumerate(("regression", "boundary")):
            row = item_row(task_id, n, layer=layer)
            table = sa.table(
                "review_items",
                *(sa.column(k, sa.JSON if k in JSON_COLUMNS else None) for k in row),
            )
            conn.execute(sa.insert(table).values(**row))
    before = _configs(db_url)

    migrate_to(db_url, REVISION)
    with get_engine(db_url).connect() as conn:
        priorities = dict(conn.execute(sa.text("SELECT layer, priority FROM review_items")).all())
    assert priorities == {"regression": PRIORITY_REGRESSION, "boundary": PRIORITY_OTHER}
    assert _claim_indexes(db_url) == {
        "ix_review_items_claim": ["task_id", "state", "priority", "id"],
        "ix_review_items_claim_any": ["state", "priority", "id"],
    }
    after = _configs(db_url)
    assert after.keys() == before.keys()
    for key, (document, digest) in after.items():
        was = before[key][0]
        assert document["review"] == {
            **was["review"],
            "regression_items": REGRESSION_ITEMS,
            "guidelines": None,
        }
        assert {k: v for k, v in document.items() if k != "review"} == {
            k: v for k, v in was.items() if k != "review"
        }
        assert digest == config_hash(document)
    # The same configs applied again are the versions stored: nothing changes.
    again = apply_tasks(engine, [TICKET_TASK, INVOICE_TASK], actor="test")
    assert [(a.changed, a.version) for a in again] == [(False, 1), (False, 1)]
    assert _configs(db_url) == after

    # And down again: no priority, the fields gone, the hash the stored document's.
    migrate_to(db_url, BEFORE, down=True)
    with get_engine(db_url).connect() as conn:
        columns = {c["name"] for c in sa.inspect(conn).get_columns("review_items")}
    assert "priority" not in columns
    assert _claim_indexes(db_url) == {"ix_review_items_claim": ["task_id", "state", "id"]}
    assert _configs(db_url) == before
