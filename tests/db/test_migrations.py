"""Migrations: upgrade to head, then no drift between the models and the schema."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import inspect

from controlplane.db import get_engine
from controlplane.migrate import check, upgrade
from controlplane.models.partitions import DAYS_AHEAD, is_partition
from tests.conftest import TEMPLATE_MIGRATED

TABLES = {
    "alembic_version",
    "alerts",
    "api_keys",
    "audit_log",
    "blocked_models",
    "dashboard_sessions",
    "decisions",
    "eval_items",
    "eval_layer_digests",
    "eval_runs",
    "failing_evaluations",
    "config_holds",
    "flag_history",
    "flag_state",
    "flags",
    "task_grades",
    "outbox_events",
    "payloads",
    "result_keys",
    "results",
    "review_items",
    "review_labels",
    "review_skips",
    "route_acc_windows",
    "scan_marks",
    "server_secrets",
    "task_config_versions",
    "tasks",
    "webhook_deliveries",
    "window_metrics",
    "windows",
}


@pytest.mark.integration
def test_postgresql_upgrade_head_then_check(pg_url: str) -> None:
    # pg_url is cloned from a template migrated by the same code; check it has no drift...
    check(pg_url)
    names = set(inspect(get_engine(pg_url)).get_table_names())
    assert {n for n in names if not is_partition(n)} == TABLES
    # results and payloads by day: the day `migrate` ran (the template's, at the start of
    # the run: yesterday for a run that crossed midnight), and the days ahead.
    [migrated_on] = TEMPLATE_MIGRATED
    for offset in range(-1, DAYS_AHEAD + 1):
        day = migrated_on + timedelta(days=offset)
        assert {f"results_p{day:%Y%m%d}", f"payloads_p{day:%Y%m%d}"} <= names
    assert {"results_default", "payloads_default"} <= names
    # ...and upgrading an already-current database is a no-op.
    upgrade(pg_url)
    check(pg_url)


def test_sqlite_upgrade_from_empty_then_check(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    upgrade(url)
    check(url)
    assert set(inspect(get_engine(url)).get_table_names()) == TABLES
    get_engine(url).dispose()
