"""Every metric the Grafana dashboard and the Prometheus rules of deploy/ query is a series
of a running API's `/metrics`: an app on a database with tasks, ingested results (repeat
pairs among them), closed windows and an open alert, so every labelled family has series.
`up` is Prometheus's own; recording rules' names come from alerts.yml."""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import update

from controlplane.db import get_engine, session_scope
from controlplane.models import Task
from controlplane.rollout.configs import apply_config
from controlplane.scheduler import run_pass
from tests.conftest import make_api
from tests.deploy.promql import (
    dashboard_queries,
    dashboard_variables,
    metric_names,
    sample_names,
    variable_query_names,
)
from tests.windowdata import LATENESS, METRICS_TASK, T0, WINDOW, generated_result, post_all

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_MADE = {"up"}  # written by Prometheus for every target, not by the target


@pytest.fixture(scope="module")
def exposition(sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = tmp_path_factory.mktemp("deploy") / "shadowplane.db"
    shutil.copy(sqlite_template, path)
    url = f"sqlite:///{path}"
    running = make_api(url)
    api = next(running)
    try:
        with session_scope(api.engine) as session:
            apply_config(session, METRICS_TASK, actor="test")
            # ticket_classify (in shadow) exists from an hour before the results and gets
            # none: the pass closes its empty windows and opens `no_traffic`.
            session.execute(
                update(Task)
                .where(Task.name == "ticket_classify")
                .values(
                    created_at=T0 - timedelta(hours=1), stage_changed_at=T0 - timedelta(hours=1)
                )
            )
        rng = random.Random(7)
        results = [generated_result(rng, i, T0, WINDOW) for i in range(60)]
        for result in results[::3]:
            if result["cloud"] is not None and result["cloud"].get("output") is not None:
                result["cloud_repeat"] = {"output": result["cloud"]["output"], "model": "large@7"}
        post_all(api, results)
        run_pass(api.engine, T0 + timedelta(seconds=2 * WINDOW + LATENESS))
        response = api.client.get("/metrics", headers=api.headers("read"))
        assert response.status_code == 200, response.text
        text = response.text
        # What the tests below rely on: labelled series of every kind of family.
        for series in (
            'shadowplane_alerts_active{kind="no_traffic",task="ticket_classify"} 1.0',
            'shadowplane_window_self_agreement{bucket="all",task="metrics_task"}',
            'shadowplane_ingest_results_total{outcome="accepted"} 60.0',
            'shadowplane_ingest_request_duration_seconds_bucket{code="200",le="+Inf"}',
            'shadowplane_decisions_total{action="rollback",task="metrics_task"} 0.0',
        ):
            assert series in text, series
        yield text
    finally:
        running.close()
        get_engine(url).dispose()


def missing(names: dict[str, set[str]], offered: set[str]) -> dict[str, list[str]]:
    return {where: sorted(n - offered) for where, n in names.items() if n - offered}


def test_every_metric_the_grafana_dashboard_queries_is_a_series_of_metrics(
    exposition: str,
) -> None:
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "shadowplane.json").read_text())
    names = {where: metric_names(query) for where, query in dashboard_queries(dashboard)}
    names |= {
        f"variable {name!r}": variable_query_names(query)
        for name, query in dashboard_variables(dashboard)
    }
    assert len(names) > 30 and all(names.values()), names
    assert missing(names, sample_names(exposition) | PROMETHEUS_MADE) == {}


def test_every_metric_the_alert_rules_query_is_a_series_of_metrics(exposition: str) -> None:
    groups = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yml").read_text())["groups"]
    rules: list[dict[str, Any]] = [rule for group in groups for rule in group["rules"]]
    recorded = {rule["record"] for rule in rules if "record" in rule}
    names = {rule.get("alert") or rule["record"]: metric_names(rule["expr"]) for rule in rules}
    assert all(names.values()), names
    # A recording rule reads only scraped series; an alert may read a recording rule too.
    offered = sample_names(exposition) | PROMETHEUS_MADE
    assert missing({k: v for k, v in names.items() if k in recorded}, offered) == {}
    assert missing(names, offered | recorded) == {}
