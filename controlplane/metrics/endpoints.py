"""Windows API: windowed metrics per task, as JSON or CSV (thin)."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timedelta
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Query, Request
from fastapi.responses import Response

from controlplane.auth.dependencies import require
from controlplane.auth.service import Principal
from controlplane.catalog.schemas import INT32_MAX
from controlplane.catalog.service import runtime_or_404
from controlplane.db import session_scope
from controlplane.errors import error_responses
from controlplane.http import ORJSONResponse, api_router
from controlplane.ingest.buckets import bucket_labels
from controlplane.metrics import service, whatif
from controlplane.metrics.fields import ALL, FIELDS
from controlplane.metrics.schemas import WhatIfOut, WindowsOut
from controlplane.models.base import utcnow
from controlplane.params import TaskName
from controlplane.timeutil import FIRST_MOMENT, UTCTime

router = api_router("/v1/tasks", tag="windows")
DEFAULT_SPAN = timedelta(hours=24)
MAX_WHATIF_SPAN = timedelta(days=31)
# A bucket's name: `0-127`, `2048+`, or `all` (controlplane.ingest.buckets).
BUCKET_PATTERN = r"^(all|[0-9]+-[0-9]+|[0-9]+\+)$"


@router.get(
    "/{task}/windows",
    response_model=WindowsOut,
    responses={
        200: {
            "description": "The rows as JSON, or as CSV (one column per field) for Accept: text/csv.",
            "content": {"text/csv": {"schema": {"type": "string"}}},
        },
        **error_responses(401, 403, 404, 422, 429, 503),
    },
)
def windows(
    task: TaskName,
    request: Request,
    _: Annotated[Principal, Depends(require("read"))],
    since: Annotated[
        UTCTime | None,
        Query(description="Windows starting at or after it (default: until - 24 h)."),
    ] = None,
    until: Annotated[
        UTCTime | None, Query(description="Windows starting before it (default: now).")
    ] = None,
    bucket: Annotated[
        str | None,
        Query(
            pattern=BUCKET_PATTERN,
            description="One length bucket (`0-127`) or `all`; 404 "
            "names the task's buckets when it has no such one.",
        ),
    ] = None,
) -> Response:
    """Windowed metrics, one flat row per window and bucket (Accept: text/csv for CSV);
    none when `since` is not before `until`."""
    with session_scope(request.app.state.engine) as session:
        runtime = runtime_or_404(session, task)
        allowed = [*bucket_labels(runtime.config.length_buckets), ALL]
        if bucket is not None and bucket not in allowed:
            raise HTTPException(
                404, f"bucket: {task} has no bucket {bucket!r}; its buckets: {', '.join(allowed)}"
            )
        until = until or utcnow() + timedelta(seconds=runtime.config.window_seconds)
        if since is None:
            # At the first day Python holds, the default span reaches back to that day.
            since = until - min(DEFAULT_SPAN, until - FIRST_MOMENT)
        rows = (
            service.window_rows(session, runtime, since=since, until=until, bucket=bucket)
            if since < until
            else []
        )
    if "text/csv" in request.headers.get("accept", ""):
        return Response(_csv(rows), media_type="text/csv; charset=utf-8")
    return ORJSONResponse({"windows": rows})


@router.get(
    "/{task}/whatif",
    response_model=WhatIfOut,
    responses=error_responses(401, 403, 404, 422, 429, 503),
)
def routing_whatif(
    task: TaskName,
    request: Request,
    _: Annotated[Principal, Depends(require("read"))],
    since: Annotated[
        UTCTime | None,
        Query(
            description="The period's start (default: until - 24 h); at most 31 days "
            "before until, an earlier one is read as that."
        ),
    ] = None,
    until: Annotated[UTCTime | None, Query(description="The period's end (default: now).")] = None,
    max_input_tokens: Annotated[int | None, Query(ge=1, le=INT32_MAX)] = None,
    min_confidence: Annotated[float | None, Query(ge=0.0, le=1.0, allow_inf_nan=False)] = None,
) -> ORJSONResponse:
    """The period's results replayed under a candidate cap and minimum edge confidence,
    beside what the task's flag does today, per length bucket and `all`, with the curve of
    agreement and cost as the cap moves (default: the last 24 h; at most the 31 days before
    `until`: the answer's `since` is the start read; an empty period when it is not before
    `until`)."""
    with session_scope(request.app.state.engine) as session:
        runtime = runtime_or_404(session, task)
        until = until or utcnow()
        # One pass over the period's results: its cost grows with the period, so it is held
        # to the 31 days before `until`, and the answer says where it started.
        if since is None:
            since = until - min(DEFAULT_SPAN, until - FIRST_MOMENT)
        since = max(since, until - min(MAX_WHATIF_SPAN, until - FIRST_MOMENT))
        found = whatif.whatif(
            session,
            runtime,
            since=since,
            until=until,
            max_input_tokens=max_input_tokens,
            min_confidence=min_confidence,
        )
    return ORJSONResponse(found)


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
    if isinstance(value, dict):
        # repeat_diffs: one JSON object in its cell.
        return json.dumps(value, sort_keys=True)
    return value
