"""The metric-name reader the deploy/ tests rely on: names from PromQL (functions,
aggregations, label names, keywords, numbers, durations and Grafana variables left out),
from Grafana's variable queries, and series names from a real exposition."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from tests.deploy.promql import metric_names, sample_names, variable_query_names


@pytest.mark.parametrize(
    ("query", "names"),
    [
        ("up", {"up"}),
        ('up{job="shadowplane"} == 0', {"up"}),
        # A function's name and its label arguments' strings are not metrics.
        ('absent(up{job="shadowplane"})', {"up"}),
        (
            "histogram_quantile(0.95, sum by (le, task) "
            '(rate(http_request_duration_seconds_bucket{job="x", le!="+Inf"}[5m])))',
            {"http_request_duration_seconds_bucket"},
        ),
        # Aggregation clause after the body; a matching clause and group_left's labels.
        (
            "sum(rate(a_total[$__rate_interval])) without (instance) "
            "/ ignoring(outcome) group_left(kind) sum by (kind) (b)",
            {"a_total", "b"},
        ),
        (
            'max by (task) (shadowplane_window_n_results{bucket="all"}) > 0\n'
            "and on (task) max by (task) "
            '(shadowplane_task_stage{stage=~"shadow|canary"}) == 1',
            {"shadowplane_window_n_results", "shadowplane_task_stage"},
        ),
        # Numbers, durations, offset, bool, unless, Inf and NaN are not names.
        ("1e3 * foo offset 5m > bool 0x1f unless bar != Inf or baz == NaN", {"foo", "bar", "baz"}),
        # Recording rules' names carry colons; subqueries and `@` modifiers.
        (
            "max_over_time(shadowplane:ingest_results:rate10m[1h:5m] @ end())",
            {"shadowplane:ingest_results:rate10m"},
        ),
        ('{__name__="by_name_only", task="t"}', {"by_name_only"}),
        ('label_replace(x, "dst", "$1", "src", "(.*)") # a comment naming y', {"x"}),
        (
            'time() - shadowplane_window_start_timestamp_seconds{task="$task"}',
            {"shadowplane_window_start_timestamp_seconds"},
        ),
        # A metric whose name begins like a keyword, or a function's.
        ("by_task_total + rate_limited + on_time", {"by_task_total", "rate_limited", "on_time"}),
    ],
)
def test_metric_names_are_read_from_promql(query: str, names: set[str]) -> None:
    assert metric_names(query) == names


@pytest.mark.parametrize(
    ("query", "names"),
    [
        ('label_values(shadowplane_task_stage{job=~"$job"}, task)', {"shadowplane_task_stage"}),
        ("label_values(task)", set()),
        (
            "query_result(topk(3, sum by (task) (shadowplane_window_n_results)))",
            {"shadowplane_window_n_results"},
        ),
        ("metrics(shadowplane_.*)", set()),
    ],
)
def test_metric_names_are_read_from_grafana_variable_queries(query: str, names: set[str]) -> None:
    assert variable_query_names(query) == names


def test_series_names_of_an_exposition_spell_histograms_and_counters_as_scraped() -> None:
    registry = CollectorRegistry()
    Histogram("ingest_seconds", "d", ["task"], registry=registry, buckets=(0.1, 1)).labels(
        "t"
    ).observe(0.3)
    Counter("results", "d", registry=registry).inc()
    Gauge("declared_only", "d", ["task"], registry=registry)  # no child: a family, no series
    Gauge("depth", "d", registry=registry).set(3)
    names = sample_names(generate_latest(registry).decode())
    assert names == {
        "ingest_seconds_bucket",
        "ingest_seconds_sum",
        "ingest_seconds_count",
        "ingest_seconds_created",
        "results_total",
        "results_created",
        "depth",
    }
