"""`/metrics` in the Prometheus text format: the latest closed window per task and bucket,
window lag, active alerts, decisions, published flags, webhook deliveries, ingest counters
and ingest request times.

A door at the top: it reads every domain, so none of them needs to know it exists.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from fastapi.responses import Response
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from controlplane.alerts.service import active_counts
from controlplane.auth.dependencies import require
from controlplane.auth.service import Principal
from controlplane.compare import native
from controlplane.db import session_scope
from controlplane.errors import error_responses
from controlplane.http import api_router
from controlplane.metrics.fields import COUNTS, PERCENTILE_FIELDS, RATES
from controlplane.metrics.service import lag, latest_closed_rows
from controlplane.models.base import utcnow
from controlplane.notify.repository import delivery_counts
from controlplane.rollout.flags import flags_document
from controlplane.rollout.repository import decision_counts

router = api_router(tag="metrics")


# Fields of the latest closed window exported per task and bucket.
EXPORTED = (
    *COUNTS,
    *RATES,
    *(f"{rate}_{part}" for rate in RATES for part in ("num", "den", "low", "high")),
    *PERCENTILE_FIELDS,
    "cost_per_1k",
    "baseline_cost_per_1k",
    "savings",
    "net_savings",
)


class _Snapshot(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {
            "description": "The Prometheus text exposition format (0.0.4).",
            "content": {"text/plain; version=0.0.4": {"schema": {"type": "string"}}},
        },
        **error_responses(401, 429, 503),
    },
)
def metrics(request: Request, _: Annotated[Principal, Depends(require(None))]) -> Response:
    """Prometheus text: latest closed window per task and bucket, ingest counters, job lag."""
    now = utcnow()
    with session_scope(request.app.state.engine) as session:
        rows = latest_closed_rows(session)
        lags = lag(session, now)
        alerts = active_counts(session)
        decided = decision_counts(session)
        published = flags_document(session)
        deliveries = delivery_counts(session)
    families: list[Metric] = []
    start = GaugeMetricFamily(
        "shadowplane_window_start_timestamp_seconds",
        "Start of the latest closed window of the task.",
        labels=["task"],
    )
    seen: set[str] = set()
    for row in rows:
        if row["task"] not in seen:
            seen.add(row["task"])
            start.add_metric([row["task"]], row["window_start"].timestamp())
    families.append(start)
    for name in EXPORTED:
        family = GaugeMetricFamily(
            f"shadowplane_window_{name}",
            f"{name} of the latest closed window, per task and length bucket.",
            labels=["task", "bucket"],
        )
        for row in rows:
            if row[name] is not None:
                family.add_metric([row["task"], row["bucket"]], float(row[name]))
        families.append(family)
    close_lag = GaugeMetricFamily(
        "shadowplane_window_close_lag_seconds",
        "Seconds past the time the newest due window should have closed (0: on time).",
        labels=["task"],
    )
    age = GaugeMetricFamily(
        "shadowplane_window_computed_age_seconds",
        "Seconds since a window of the task was last computed.",
        labels=["task"],
    )
    for item in lags:
        close_lag.add_metric([item.task], item.close_lag_seconds)
        if item.computed_age_seconds is not None:
            age.add_metric([item.task], item.computed_age_seconds)
    families += [close_lag, age]
    active = GaugeMetricFamily(
        "shadowplane_alerts_active",
        "Alerts open or acknowledged, per task and kind.",
        labels=["task", "kind"],
    )
    for (task, kind), n in sorted(alerts.items()):
        active.add_metric([task, kind], n)
    families.append(active)
    decisions = CounterMetricFamily(
        "shadowplane_decisions",
        "Rollout decisions recorded, per task and action (kill and lift: task empty).",
        labels=["task", "action"],
    )
    for (task, action), n in sorted(decided.items()):
        decisions.add_metric([task, action], n)
    families.append(decisions)
    stage = GaugeMetricFamily(
        "shadowplane_task_stage",
        "1 for the stage each task's flag publishes (cloud, shadow, canary, full, rolled_back).",
        labels=["task", "stage"],
    )
    edge_percent = GaugeMetricFamily(
        "shadowplane_flag_edge_percent",
        "The edge_percent each task's flag publishes.",
        labels=["task"],
    )
    killed = GaugeMetricFamily(
        "shadowplane_flag_killed",
        "1 while a task's flag is killed (every request to the cloud, its stage kept): the "
        "kill switch, a stored config that does not parse, or rollout evaluations failing "
        "for 15 minutes.",
        labels=["task"],
    )
    for task, flag in published["flags"].items():
        stage.add_metric([task, flag["stage"]], 1)
        edge_percent.add_metric([task], flag["edge_percent"])
        killed.add_metric([task], 1 if flag.get("killed") else 0)
    revision = GaugeMetricFamily("shadowplane_flags_revision", "The global flag revision.")
    revision.add_metric([], published["revision"])
    families += [stage, edge_percent, killed, revision]
    webhooks = GaugeMetricFamily(
        "shadowplane_webhook_deliveries",
        "Webhook deliveries waiting to be sent (pending) or given up (failed).",
        labels=["status"],
    )
    for status in ("pending", "failed"):
        webhooks.add_metric([status], deliveries[status])
    families.append(webhooks)
    up = GaugeMetricFamily(
        "shadowplane_ingest_counters_up", "1 when the shared ingest counters could be read."
    )
    try:
        ingest = request.app.state.counters.read()
    except Exception:  # any client failure: the shared counters are not readable
        up.add_metric([], 0)
    else:
        up.add_metric([], 1)
        counter = CounterMetricFamily(
            "shadowplane_ingest_results",
            "Results answered by POST /v1/results, by outcome.",
            labels=["outcome"],
        )
        for outcome, n in ingest.results.items():
            counter.add_metric([outcome], n)
        durations = HistogramMetricFamily(
            "shadowplane_ingest_request_duration_seconds",
            "Seconds POST /v1/results took to answer, by status code (422: refused whole).",
            labels=["code"],
        )
        for code, times in ingest.durations.items():
            durations.add_metric([code], times.buckets(), times.sum_us / 1_000_000)
        families += [counter, durations]
    families.append(up)
    reader = GaugeMetricFamily(
        "shadowplane_native_reader",
        "1 when this process reads texts with the compiled reader, 0 with the Python one.",
    )
    reader.add_metric([], 1 if native.ACTIVE else 0)
    families.append(reader)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(families))
    return Response(
        generate_latest(registry), media_type="text/plain; version=0.0.4; charset=utf-8"
    )
