"""The rollback-triggers migration (5d8e2f7a9c10) on data: stored configs name the
input-shift alert's line (`alerts.input_shift: 0.1`) where they named the p95 drift, still
parse, and hash as they are stored; every task, flag, flag-history row and decision
survives (on SQLite the tasks table is altered in place, never copied and dropped, which
would cascade to every row that references a task); the way down restores the p95 drift.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from controlplane.catalog.schemas import config_document, config_hash, parse_config
from controlplane.db import get_engine
from controlplane.rollout import actions
from controlplane.rollout.configs import apply_tasks
from tests.conftest import INVOICE_TASK, TICKET_TASK
from tests.db.migrating import migrate_to

BEFORE = "3c1f0a9e7b21"
REVISION = "5d8e2f7a9c10"
# The next migration (regression_first) adds review fields to stored configs.
LATER = "7b3e9d1c4f28"

VERSIONS = sa.table(
    "task_config_versions",
    sa.column("id", sa.Integer),
    sa.column("task_id", sa.Integer),
    sa.column("version", sa.Integer),
    sa.column("config", sa.JSON),
    sa.column("config_hash", sa.String),
    sa.column("created_by", sa.String),
    sa.column("created_at", sa.DateTime(timezone=True)),
)
# Columns every revision here has; the migration adds to tasks and drops one.
KEPT = {
    "tasks": "id, name, stage, config_version, canary_step, stage_changed_at, updated_at",
    "flags": "*",
    "flag_history": "*",
    "decisions": "*",
}


def _document(value: Any) -> dict[str, Any]:
    return json.loads(value) if isinstance(value, str) else dict(value)


def _configs(url: str) -> dict[tuple[int, int], tuple[dict[str, Any], str]]:
    """Every stored config version: (task id, version) → (document, stored hash)."""
    with get_engine(url).connect() as conn:
        rows = conn.execute(
            sa.select(
                VERSIONS.c.task_id, VERSIONS.c.version, VERSIONS.c.config, VERSIONS.c.config_hash
            )
        )
        return {(t, v): (_document(c), h) for t, v, c, h in rows}


def _rows(url: str) -> dict[str, list[Any]]:
    with get_engine(url).connect() as conn:
        return {
            table: [
                tuple(r) for r in conn.execute(sa.text(f"SELECT {cols} FROM {table} ORDER BY 1, 2"))
            ]
            for table, cols in KEPT.items()
        }


def _old_code_document(document: dict[str, Any]) -> dict[str, Any]:
    """A config as the code of revision 3c1f0a9e7b21 stored it: no fixed costs, no rule
    spans and no input_shift rule, and its own p95 drift line."""
    rules = [
        {k: v for k, v in rule.items() if k != "span"}
        for rule in document["rollback"]["rules"]
        if rule["metric"] != "input_shift"
    ]
    alerts = {k: v for k, v in document["alerts"].items() if k != "input_shift"}
    return {
        **{k: v for k, v in document.items() if k != "fixed_costs"},
        "error_cost": 0.3,
        "alerts": {**alerts, "input_p95_drift": 0.45},
        "rollback": {**document["rollback"], "rules": rules},
    }


@pytest.mark.fresh_db  # migrates down and up
def test_stored_configs_move_to_the_input_shift_alert_and_every_task_row_survives(
    db_url: str,
) -> None:
    engine = get_engine(db_url)
    apply_tasks(engine, [TICKET_TASK, INVOICE_TASK], actor="test")
    actions.rollback(engine, "ticket_classify", actor="test", reason="a drill")
    actions.rearm(engine, "ticket_classify", actor="test", reason="drill over")

    # Down to the revision before: configs stored by today's code name the p95 drift again.
    migrate_to(db_url, BEFORE, down=True)
    for document, digest in _configs(db_url).values():
        assert document["alerts"]["input_p95_drift"] == 0.3
        assert "input_shift" not in document["alerts"]
        assert digest == config_hash(document)

    # A version stored by the code of that revision, with a p95 line of its own.
    with get_engine(db_url).connect() as conn:
        task_id = conn.execute(
            sa.text("SELECT id FROM tasks WHERE name = 'ticket_classify'")
        ).scalar_one()
    old = _old_code_document(_configs(db_url)[(task_id, 1)][0])
    with get_engine(db_url).begin() as conn:
        conn.execute(
            sa.insert(VERSIONS).values(
                task_id=task_id,
                version=2,
                config=old,
                config_hash=config_hash(old),
                created_by="test",
                created_at=datetime(2026, 12, 1, tzinfo=UTC),
            )
        )
        conn.execute(
            sa.text(
                "UPDATE tasks SET config_version = 2, input_p95_baseline = 812.0 WHERE id = :id"
            ),
            {"id": task_id},
        )
    before, rows = _configs(db_url), _rows(db_url)
    assert len(before) == 3
    # Two tasks' flags, the drill's two decisions, and a flag version for each change.
    assert (len(rows["flags"]), len(rows["decisions"])) == (2, 2), rows
    assert len(rows["flag_history"]) >= 4, rows

    migrate_to(db_url, REVISION)
    after = _configs(db_url)
    assert after.keys() == before.keys()
    for key, (document, digest) in after.items():
        was = before[key][0]
        # The line is the input-shift alert's default, whatever the p95 drift's was.
        assert document["alerts"] == {
            **{k: v for k, v in was["alerts"].items() if k != "input_p95_drift"},
            "input_shift": 0.1,
        }
        assert {k: v for k, v in document.items() if k != "alerts"} == {
            k: v for k, v in was.items() if k != "alerts"
        }
        # The hash is the stored document's, as config_hash computes it.
        assert digest == config_hash(document)
        assert parse_config(document).alerts.input_shift == 0.1
    # A document today's code stored is its own normalised form again (once the later
    # migrations have added their fields too): applying the same config still answers
    # with its version.
    migrate_to(db_url, LATER)
    after = _configs(db_url)
    for key in [(task_id, 1), *(k for k in after if k[0] != task_id)]:
        document, digest = after[key]
        assert config_hash(config_document(parse_config(document))) == digest
    assert parse_config(after[(task_id, 2)][0]).error_cost == 0.3

    assert _rows(db_url) == rows
    with get_engine(db_url).connect() as conn:
        marks = conn.execute(
            sa.text("SELECT needs_regrade, shifted_at, input_baseline FROM tasks ORDER BY id")
        ).all()
    assert [tuple(m) for m in marks] == [(False, None, None)] * 2

    # And down again: the p95 drift's line is back (its default: the value it had is gone).
    migrate_to(db_url, BEFORE, down=True)
    for document, digest in _configs(db_url).values():
        assert document["alerts"]["input_p95_drift"] == 0.3
        assert "input_shift" not in document["alerts"]
        assert digest == config_hash(document)
    assert _rows(db_url) == rows
