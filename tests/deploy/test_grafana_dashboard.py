"""deploy/grafana/shadowplane.json imports into any Grafana (its data source is a variable,
never a fixed uid), has a `task` variable from the metrics, one row repeated per task, and
charts what an SRE watches: per task stage, decisions, agreement, edge share and alerts;
ingest rate and latency, window lag and webhook deliveries."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.deploy.promql import (
    dashboard_queries,
    dashboard_variables,
    metric_names,
    variable_query_names,
)

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "shadowplane.json"
SOURCE = {"type": "prometheus", "uid": "${datasource}"}


def load() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def every_panel(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in items:
        yield panel
        yield from every_panel(panel.get("panels", []))


def test_the_dashboard_reads_its_data_source_from_a_variable() -> None:
    dashboard = load()
    assert dashboard["schemaVersion"] >= 39
    assert dashboard["uid"] and dashboard["id"] is None
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in every_panel(dashboard["panels"]):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == SOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == SOURCE, panel["title"]
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"] == SOURCE, variable["name"]
    queried = [a for a in dashboard["annotations"]["list"] if a.get("expr")]
    assert queried and all(a["datasource"] == SOURCE for a in queried)
    # No data source of a particular Grafana anywhere (an exported dashboard's fixed uid).
    uids = re.findall(r'"uid":\s*"([^"]*)"', DASHBOARD.read_text(encoding="utf-8"))
    assert set(uids) <= {"${datasource}", "-- Grafana --", dashboard["uid"]}, uids


def test_tasks_come_from_the_metrics_and_a_row_repeats_per_task() -> None:
    dashboard = load()
    queries = dict(dashboard_variables(dashboard))
    assert re.fullmatch(r"label_values\(shadowplane_\w+(\{[^}]*\})?, task\)", queries["task"])
    task = next(v for v in dashboard["templating"]["list"] if v["name"] == "task")
    assert task["multi"] and task["includeAll"]
    rows = [p for p in dashboard["panels"] if p["type"] == "row" and p.get("repeat") == "task"]
    assert len(rows) == 1
    # The repeated row's panels (those after it) each chart one task: `task="$task"`.
    after = dashboard["panels"][dashboard["panels"].index(rows[0]) + 1 :]
    assert after and all(
        'task="$task"' in target["expr"] for panel in after for target in panel["targets"]
    )


def test_panel_ids_are_unique_and_panels_fit_the_grid() -> None:
    panels = list(every_panel(load()["panels"]))
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids))
    for panel in panels:
        pos = panel["gridPos"]
        assert 0 <= pos["x"] and pos["x"] + pos["w"] <= 24, panel["title"]


def test_the_dashboard_charts_what_the_sre_watches() -> None:
    dashboard = load()
    named = set().union(*(metric_names(q) for _, q in dashboard_queries(dashboard)))
    named |= set().union(*(variable_query_names(q) for _, q in dashboard_variables(dashboard)))
    watched = {
        "shadowplane_task_stage",  # stage, so each decision
        "shadowplane_flag_killed",  # the kill switch, which keeps the stages
        "shadowplane_window_agreement",
        "shadowplane_window_edge_share",
        "shadowplane_alerts_active",
        "shadowplane_ingest_results_total",
        "shadowplane_ingest_request_duration_seconds_bucket",  # ingest latency
        "shadowplane_decisions_total",
        "shadowplane_window_edge_latency_ms_p95",
        "shadowplane_window_cloud_latency_ms_p95",
        "shadowplane_window_close_lag_seconds",
        "shadowplane_webhook_deliveries",
    }
    assert watched - named == set()


def test_ingest_latency_is_one_replicas_histogram_of_answered_batches() -> None:
    """Every replica exports the same shared histogram, so a sum over replicas counts each
    request once per replica: every query of it takes one replica's (the max), as the
    counters' do, its codes summed within the replica; p50, p95 and p99 of every batch but
    a body refused whole (422s, answered at once, left out; 503s, batches that waited out a
    lock, kept)."""
    histogram = "shadowplane_ingest_request_duration_seconds"
    queries = [q for _, q in dashboard_queries(load()) if histogram in q]
    quantiles = [q for q in queries if "histogram_quantile" in q]
    assert re.findall(r"histogram_quantile\((0\.\d+),", " ".join(quantiles)) == [
        "0.5",
        "0.95",
        "0.99",
    ]
    for query in quantiles:
        assert re.search(
            rf"max by \(le\) \(sum by \(instance, le\) \(rate\({histogram}_bucket"
            rf"\{{[^}}]*code!=\"422\"",
            query,
        ), query
    assert len(queries) > len(quantiles)  # the mean and the rate of refused bodies
    # A sum only within a replica (over codes), never across replicas.
    sums = [s for q in queries for s in re.findall(r"\bsum\b(?:\s*by\s*\([^)]*\))?", q)]
    assert all(s.strip() in ("sum by (instance, le)", "sum by (instance)") for s in sums), sums
