"""Windows API (JSON or CSV) and `/metrics` in the Prometheus text format (thin)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import redis
from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import Response
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from controlplane.alerts.service import active_counts
from controlplane.auth.dependencies import require
from controlplane.auth.service import Principal
from controlplane.catalog.service import task_runtimes
from controlplane.db import session_scope
from controlplane.http import ORJSONResponse
from controlplane.ingest.buckets import bucket_labels
from controlplane.metrics import service
from controlplane.metrics.fields import ALL, COUNTS, FIELDS, PERCENTILE_FIELDS, RATES
from controlplane.models.base import utcnow
from controlplane.notify.repository import delivery_counts
from controlplane.rollout.flags import flags_document
from controlplane.timeutil import UTCTime

router = APIRouter(prefix="/v1/tasks", tags=["windows"])
prometheus_router = APIRouter(tags=["metrics"])
DEFAULT_SPAN = timedelta(hours=24)


@router.get("/{task}/windows")
def windows(
    task: str,
    request: Request,
    _: Annotated[Principal, Depends(require("read"))],
    since: UTCTime | None = None,
    until: UTCTime | None = None,
    bucket: str | None = None,
) -> Response:
    """Windowed metrics, one flat row per window and bucket (Accept: text/csv for CSV)."""
    with session_scope(request.app.state.engine) as session:
        runtime = task_runtimes(session, {task}).get(task)
        if runtime is None:
            raise HTTPException(404, f"task: no task {task!r}")
        allowed = [*bucket_labels(runtime.config.length_buckets), ALL]
        if bucket is not None and bucket not in allowed:
            raise HTTPException(
                422, f"bucket: {bucket!r} is not a bucket of {task}; allowed: {', '.join(allowed)}"
            )
        until = until or utcnow() + timedelta(seconds=runtime.config.window_seconds)
        if since is None:
            # At the first day Python holds, the default span reaches back to that day.
            since = until - min(DEFAULT_SPAN, until - datetime.min.replace(tzinfo=UTC))
        if since >= until:
            raise HTTPException(
                422, f"since: {since.isoformat()} is not before until ({until.isoformat()})"
            )
        rows = service.window_rows(session, runtime, since=since, until=until, bucket=bucket)
    if "text/csv" in request.headers.get("accept", ""):
        return Response(_csv(rows), media_type="text/csv; charset=utf-8")
    return ORJSONResponse({"windows": rows})


def _csv(rows: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=FIELDS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _cell(v) for k, v in row.items()})
    return out.getvalue()


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.isoformat()
    return value


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


@prometheus_router.get("/metrics", response_class=Response)
def metrics(request: Request, _: Annotated[Principal, Depends(require(None))]) -> Response:
    """Prometheus text: latest closed window per task and bucket, ingest counters, job lag."""
    now = utcnow()
    with session_scope(request.app.state.engine) as session:
        rows = service.latest_closed_rows(session)
        lags = service.lag(session, now)
        alerts = active_counts(session)
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
            f"{name} of the latest closed window (DESIGN §3), per task and length bucket.",
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
    for task, flag in published["flags"].items():
        stage.add_metric([task, flag["stage"]], 1)
        edge_percent.add_metric([task], flag["edge_percent"])
    revision = GaugeMetricFamily("shadowplane_flags_revision", "The global flag revision.")
    revision.add_metric([], published["revision"])
    families += [stage, edge_percent, revision]
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
        totals = request.app.state.counters.totals()
    except redis.RedisError:
        up.add_metric([], 0)
    else:
        up.add_metric([], 1)
        counter = CounterMetricFamily(
            "shadowplane_ingest_results",
            "Results answered by POST /v1/results, by outcome.",
            labels=["outcome"],
        )
        for outcome, n in totals.items():
            counter.add_metric([outcome], n)
        families.append(counter)
    families.append(up)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(families))
    return Response(
        generate_latest(registry), media_type="text/plain; version=0.0.4; charset=utf-8"
    )
