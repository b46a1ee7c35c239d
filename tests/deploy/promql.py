"""The metric names a PromQL query reads, the queries of a Grafana dashboard, and the series
names of a `/metrics` exposition: what the tests of deploy/ compare."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

# Words of PromQL that stand where a metric name could: operators, modifiers, literals.
KEYWORDS = frozenset(
    {
        "and",
        "or",
        "unless",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "offset",
        "atan2",
        "inf",
        "nan",
    }
)
STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
NAME_MATCHER = re.compile(r"__name__\s*=\s*(\"[^\"]*\"|'[^']*')")
# A grouping or matching clause's label list: `by (task, le)`, `group_left(kind)`.
LABEL_LIST = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
GRAFANA_VARIABLE = re.compile(r"\$\{[^}]*\}|\$\w+|\[\[[^\]]*\]\]")
# Whole identifiers only (not "rat" of "rate("), not inside a number ("e3" of "1e3") or a
# duration ("m" of "5m"), and not called.
IDENTIFIER = re.compile(r"(?<![\w.:])([A-Za-z_:][\w:]*)(?![\w:])(?!\s*\()")
# Grafana's own query functions of template variables: the metric is their first argument.
LABEL_VALUES = re.compile(r"^\s*label_values\s*\((.*),\s*\w+\s*\)\s*$", re.S)
QUERY_RESULT = re.compile(r"^\s*query_result\s*\((.*)\)\s*$", re.S)


def metric_names(query: str) -> set[str]:
    """Metric names (and recording rules' names) a PromQL query selects: identifiers that
    are not functions or aggregations (followed by `(`), label names, keywords, numbers,
    durations or Grafana variables."""
    named = {m.group(1)[1:-1] for m in NAME_MATCHER.finditer(query)}
    text = STRING.sub('""', query)
    text = re.sub(r"#[^\n]*", " ", text)  # comments
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    text = GRAFANA_VARIABLE.sub(" ", text)
    text = LABEL_LIST.sub(" ", text)  # `sum by (task) (x)` reads as `sum (x)`
    found = {m.group(1) for m in IDENTIFIER.finditer(text)}
    return named | {name for name in found if name.lower() not in KEYWORDS}


def variable_query_names(query: str) -> set[str]:
    """The metric names of a Grafana template variable's query: `label_values(metric,
    label)`, `label_values(label)` (no metric), `query_result(promql)`, `metrics(regex)`."""
    if match := LABEL_VALUES.match(query):
        return metric_names(match.group(1))
    if match := QUERY_RESULT.match(query):
        return metric_names(match.group(1))
    if re.match(r"^\s*(label_values|label_names|metrics)\s*\(", query):
        return set()
    return metric_names(query)


def dashboard_queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) for every query of a dashboard: each panel's targets (rows' panels
    included) and its annotations; template variables are given by `dashboard_variables`."""

    def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in items:
            yield panel
            yield from panels(panel.get("panels", []))

    for panel in panels(dashboard.get("panels", [])):
        for target in panel.get("targets", []):
            if target.get("expr"):
                yield f"panel {panel.get('title')!r} {target.get('refId')}", target["expr"]
    for annotation in dashboard.get("annotations", {}).get("list", []):
        if annotation.get("expr"):
            yield f"annotation {annotation.get('name')!r}", annotation["expr"]


def dashboard_variables(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(name, query) of every query variable of a dashboard."""
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable.get("query")
            yield variable["name"], query.get("query", "") if isinstance(query, dict) else query


def sample_names(text: str) -> set[str]:
    """The names of the samples of an exposition: series that exist now."""
    return {
        re.split(r"[{\s]", line, maxsplit=1)[0]
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
