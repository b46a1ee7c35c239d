"""Rollout endpoints (thin): flags, task configs and views, the gate, people's stage
actions, the kill switch, decisions. Each action endpoint calls one function of
`controlplane.rollout.actions` or `.configs` (which audit and announce it); an
`ActionError` becomes its HTTP answer in `controlplane.api`."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from sqlalchemy import Engine

from controlplane.auth.dependencies import key_check_due, require, still_allowed
from controlplane.auth.service import Principal
from controlplane.catalog import service as catalog
from controlplane.catalog.schemas import ConfigError, read_documents
from controlplane.catalog.service import runtime_or_404, task_or_404
from controlplane.db import session_scope
from controlplane.errors import error_responses
from controlplane.evalsets.gate import progress_view
from controlplane.http import ORJSONResponse, api_router, read_body
from controlplane.metrics.service import latest_closed_rows
from controlplane.params import TaskFilter, TaskName
from controlplane.rollout import actions, configs, flags, service
from controlplane.rollout.flagcopy import FlagCopy
from controlplane.rollout.flagpolls import cache_headers
from controlplane.rollout.flagstream import BUSY_RETRY_SECONDS, FlagStream, StreamSlots
from controlplane.rollout.schemas import (
    ActionIn,
    AppliedOut,
    DecisionAction,
    DecisionOut,
    DecisionsOut,
    FlagHistoryOut,
    FlagOut,
    FlagsOut,
    GateOut,
    KillIn,
    PromoteIn,
    RegressionOut,
    TaskDetailOut,
    UnblockIn,
    UnblockOut,
)

router = api_router("/v1/flags", tag="flags")

# Answered from the process's copy of the flags (controlplane.rollout.flagcopy): bytes
# rendered once per revision, never a query. Documented, not re-validated.
_CACHED: dict[str, Any] = {
    "ETag": {
        "description": "A hash of the body alone: the same on every replica.",
        "schema": {"type": "string"},
    },
    "X-Shadowplane-Stale": {
        "description": "Only when storage cannot be reached: whole seconds since this "
        "process last confirmed its copy of the flags (the answer is that copy).",
        "schema": {"type": "integer"},
    },
}
_NOT_MODIFIED: dict[int | str, dict[str, Any]] = {
    304: {
        "description": "Unchanged since an ETag sent in If-None-Match (no body).",
        "headers": _CACHED,
    }
}


# One server-sent event of the flag stream (OpenAPI 3.1: the schema describes each event):
# the flags document of a revision, or a heartbeat naming the revision the process holds.
_JSON = "application/json"
_EVENT: dict[str, Any] = {
    "oneOf": [
        {
            "type": "object",
            "required": ["event", "id", "data"],
            "properties": {
                "event": {"const": "flags"},
                "id": {"type": "string", "pattern": "^[0-9]+$", "description": "The revision."},
                "data": {
                    "type": "string",
                    "contentMediaType": _JSON,
                    "contentSchema": {"$ref": "#/components/schemas/FlagsOut"},
                },
            },
        },
        {
            "type": "object",
            "required": ["event", "data"],
            "properties": {
                "event": {"const": "heartbeat"},
                "data": {
                    "type": "string",
                    "contentMediaType": _JSON,
                    "contentSchema": {
                        "type": "object",
                        "required": ["revision", "stale_seconds"],
                        "properties": {
                            "revision": {"type": "integer"},
                            "stale_seconds": {"type": ["integer", "null"]},
                        },
                    },
                },
            },
        },
    ]
}


def _flag_copy(request: Request) -> FlagCopy:
    copy: FlagCopy = request.app.state.flag_copy
    return copy


def _conditional(request: Request, body: bytes, tag: str, stale: float | None) -> Response:
    headers = cache_headers(tag, stale)
    if flags.matches(request.headers.get("if-none-match"), tag):
        return Response(status_code=304, headers=headers)
    return Response(body, media_type="application/json", headers=headers)


@router.get(
    "",
    response_model=FlagsOut,
    responses={
        200: {"headers": _CACHED},
        **_NOT_MODIFIED,
        **error_responses(401, 403, 429, 503),
    },
)
async def all_flags(
    request: Request, _: Annotated[Principal, Depends(require("flags:read"))]
) -> Response:
    """Every task's routing flag and the global revision; ETag, and 304 for If-None-Match."""
    snapshot = _flag_copy(request).snapshot()
    return _conditional(request, snapshot.body, snapshot.etag, snapshot.stale_seconds)


@router.get(
    "/stream",
    response_class=FlagStream,
    status_code=200,
    responses={
        200: {
            "description": "Server-Sent Events: `id: <revision>`, `event: flags`, `data:` the "
            "whole flags document on one line, on connect (unless Last-Event-ID is the "
            "current revision) and at every new revision; between them `event: heartbeat` "
            "with the revision the process holds and how stale its copy is.",
            "content": {"text/event-stream": {"schema": _EVENT}},
        },
        **error_responses(401, 403, 429, 503),
    },
)
async def flag_stream(
    request: Request, principal: Annotated[Principal, Depends(require("flags:read"))]
) -> Response:
    """The flags pushed: the document on connect, then one event per revision."""
    settings = request.app.state.settings
    copy = _flag_copy(request)
    first = copy.snapshot()
    slots: StreamSlots | None = getattr(request.app.state, "flag_stream_slots", None)
    if slots is None:
        slots = request.app.state.flag_stream_slots = StreamSlots(settings.flag_streams_per_key)
    key = principal.key_id or principal.name
    if not slots.acquire(key):
        raise HTTPException(
            429,
            f"flags stream: key {principal.name!r} already holds {slots.per_key} open streams "
            "on this process, the most one key may (SHADOWPLANE_FLAG_STREAMS_PER_KEY); close "
            f"one, or poll GET /v1/flags meanwhile; retry in {BUSY_RETRY_SECONDS} s",
            headers={"Retry-After": str(BUSY_RETRY_SECONDS)},
        )
    return FlagStream(
        copy,
        first,
        request.headers.get("last-event-id"),
        heartbeat=settings.flag_stream_heartbeat_seconds,
        release=lambda: slots.release(key),
        # A revoked key's stream ends within the key cache's age, as its polls stop.
        allowed=still_allowed(request, "flags:read"),
        check_due=key_check_due(request),
    )


@router.get(
    "/{task}",
    response_model=FlagOut,
    responses={
        200: {"headers": _CACHED},
        **_NOT_MODIFIED,
        **error_responses(401, 403, 404, 422, 429, 503),
    },
)
async def one_flag(
    task: TaskName, request: Request, _: Annotated[Principal, Depends(require("flags:read"))]
) -> Response:
    """One task's routing flag; ETag, and 304 for If-None-Match; 404: route it to the cloud."""
    snapshot = _flag_copy(request).snapshot()
    found = snapshot.tasks.get(task)
    if found is None:
        raise HTTPException(404, f"task: no flag for {task!r}; unknown tasks route to the cloud")
    return _conditional(request, found[0], found[1], snapshot.stale_seconds)


@router.get(
    "/{task}/history",
    response_model=FlagHistoryOut,
    responses=error_responses(401, 403, 404, 422, 429, 503),
)
def flag_history(
    task: TaskName, request: Request, _: Annotated[Principal, Depends(require("read"))]
) -> ORJSONResponse:
    """Every version of one task's flag, oldest first: routing fields, cause and time."""
    with session_scope(request.app.state.engine) as session:
        found = task_or_404(session, task)
        return ORJSONResponse({"task": task, "versions": flags.history(session, found.id)})


# POST /v1/tasks publishes a flag, and GET /v1/tasks/{task} shows it with the latest
# metrics: both read above the catalog, so they live here (tagged with the catalog's name).
catalog_router = api_router("/v1/tasks", tag="tasks")


@catalog_router.post(
    "",
    response_model=AppliedOut,
    responses={
        200: {"description": "Unchanged: the config is the task's current version."},
        201: {"model": AppliedOut, "description": "A new task, or a new config version."},
        **error_responses(401, 403, 409, 413, 422, 429, 503),
    },
    # Read from the raw body (JSON, or YAML with a YAML content type) and validated whole,
    # so that 422 lists every error; this documents it.
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                media: {"schema": {"$ref": "#/components/schemas/TaskConfig"}}
                for media in ("application/json", "application/yaml")
            },
        }
    },
)
async def apply_task(
    request: Request, principal: Annotated[Principal, Depends(require("admin"))]
) -> Response:
    """Register a task or give it a new config version (JSON, or YAML with a YAML content type)."""
    body = await read_body(request, request.app.state.settings.max_body_bytes)
    # Read in a worker thread, as json_body reads a body: a large config takes seconds to
    # read (1 MB of YAML: 11 s), and on the event loop that held every other request.
    raw = await run_in_threadpool(_parse, body, request.headers.get("content-type", ""))

    (applied,) = await run_in_threadpool(
        configs.apply_tasks, request.app.state.engine, [raw], actor=principal.name
    )
    return ORJSONResponse(
        {
            "task": applied.task,
            "version": applied.version,
            "changed": applied.changed,
            "created": applied.created,
            "stage": applied.stage,
            "config": applied.config,
        },
        status_code=201 if applied.changed else 200,
    )


def _parse(body: bytes, content_type: str) -> Any:
    try:
        documents = read_documents(body, yaml_text="yaml" in content_type)
    except ConfigError as exc:
        raise HTTPException(422, exc.errors) from None
    if len(documents) != 1:
        raise HTTPException(422, [f"(body): holds {len(documents)} documents; send one config"])
    return documents[0]


@catalog_router.get(
    "/{task}",
    response_model=TaskDetailOut,
    responses=error_responses(401, 403, 404, 422, 429, 503),
)
def get_task(
    task: TaskName, request: Request, _: Annotated[Principal, Depends(require("read"))]
) -> ORJSONResponse:
    """One task: config, stage, version, flag, latest closed window (`all`), re-grade mark."""
    with session_scope(request.app.state.engine) as session:
        found = task_or_404(session, task)
        view = catalog.task_view(session, found)
        view["flag"] = flags.flag_of(session, task)
        view["needs_regrade"], view["shifted_at"] = found.needs_regrade, found.shifted_at
        rows = latest_closed_rows(session, found.id)
        view["latest_window"] = next((r for r in rows if r["bucket"] == "all"), None)
    return ORJSONResponse(view)


tasks_router = api_router("/v1/tasks", tag="rollout")
decisions_router = api_router("/v1/decisions", tag="rollout")
kill_router = api_router("/v1/kill", tag="rollout")


def _engine(request: Request) -> Engine:
    engine: Engine = request.app.state.engine
    return engine


@tasks_router.get(
    "/{task}/gate",
    response_model=GateOut,
    responses=error_responses(401, 403, 404, 422, 429, 503),
)
def get_gate(
    task: TaskName, request: Request, _: Annotated[Principal, Depends(require("read"))]
) -> ORJSONResponse:
    """The promotion gate's verdict per judged bucket over the windows closed in the stage."""
    with session_scope(_engine(request)) as session:
        config = runtime_or_404(session, task).config
        return ORJSONResponse(service.gate(session, task_or_404(session, task), config))


@tasks_router.get(
    "/{task}/regression",
    response_model=RegressionOut,
    responses=error_responses(401, 403, 404, 422, 429, 503),
)
def get_regression(
    task: TaskName, request: Request, _: Annotated[Principal, Depends(require("read"))]
) -> ORJSONResponse:
    """Per blocked edge model: regression items labelled, needed and in the set, the model
    to run, and what unblocking still needs."""
    with session_scope(_engine(request)) as session:
        config = runtime_or_404(session, task).config
        return ORJSONResponse(progress_view(session, task_or_404(session, task), config))


@tasks_router.post(
    "/{task}/promote",
    response_model=DecisionOut,
    responses=error_responses(401, 403, 404, 409, 413, 422, 429, 503),
)
def promote(
    task: TaskName,
    body: PromoteIn,
    request: Request,
    who: Annotated[Principal, Depends(require("admin"))],
) -> ORJSONResponse:
    """Move the task one stage on (cloud → shadow → canary steps → full); 409 with the gate's
    verdict or the error-cost veto when blocked, or when the task is no longer at
    `expected_stage`; `force` overrides the gate, never the veto."""
    return ORJSONResponse(
        actions.promote(
            _engine(request),
            task,
            actor=who.name,
            reason=body.reason,
            force=body.force,
            expected_stage=body.expected_stage,
            veto=request.app.state.settings.error_cost_veto,
        )
    )


@tasks_router.post(
    "/{task}/rollback",
    response_model=DecisionOut,
    responses=error_responses(401, 403, 404, 409, 413, 422, 429, 503),
)
def rollback(
    task: TaskName,
    body: ActionIn,
    request: Request,
    who: Annotated[Principal, Depends(require("admin"))],
) -> ORJSONResponse:
    """Send the task back to the cloud now (stage rolled_back), with a reason."""
    return ORJSONResponse(
        actions.rollback(_engine(request), task, actor=who.name, reason=body.reason)
    )


@tasks_router.post(
    "/{task}/rearm",
    response_model=DecisionOut,
    responses=error_responses(401, 403, 404, 409, 413, 422, 429, 503),
)
def rearm(
    task: TaskName,
    body: ActionIn,
    request: Request,
    who: Annotated[Principal, Depends(require("admin"))],
) -> ORJSONResponse:
    """Re-arm a rolled-back task to shadow; its evidence starts over."""
    return ORJSONResponse(actions.rearm(_engine(request), task, actor=who.name, reason=body.reason))


@tasks_router.post(
    "/{task}/unblock",
    response_model=UnblockOut,
    responses=error_responses(401, 403, 404, 409, 413, 422, 429, 503),
)
def unblock(
    task: TaskName,
    body: UnblockIn,
    request: Request,
    who: Annotated[Principal, Depends(require("admin"))],
) -> ORJSONResponse:
    """Lift the auto-promotion block a rollback put on an edge model version: 409 unless a
    stored run of that model on the task's current regression eval set reaches
    `promotion.regression_min_accuracy`, or `force` (audited)."""
    return ORJSONResponse(
        actions.unblock(
            _engine(request),
            task,
            model=body.model,
            actor=who.name,
            reason=body.reason,
            force=body.force,
        )
    )


@kill_router.post(
    "",
    response_model=DecisionOut,
    responses=error_responses(401, 403, 409, 413, 422, 429, 503),
)
def kill(
    body: KillIn, request: Request, who: Annotated[Principal, Depends(require("admin"))]
) -> ORJSONResponse:
    """The global kill switch: every flag says cloud (edge_percent 0, shadow_rate 0) until lifted."""
    return ORJSONResponse(actions.kill(_engine(request), actor=who.name, reason=body.reason))


@kill_router.post(
    "/lift",
    response_model=DecisionOut,
    responses=error_responses(401, 403, 409, 413, 422, 429, 503),
)
def lift(
    body: KillIn, request: Request, who: Annotated[Principal, Depends(require("admin"))]
) -> ORJSONResponse:
    """Lift the kill switch: every flag goes back to its stage."""
    return ORJSONResponse(actions.lift(_engine(request), actor=who.name, reason=body.reason))


@decisions_router.get(
    "", response_model=DecisionsOut, responses=error_responses(401, 403, 422, 429, 503)
)
def decisions(
    request: Request,
    _: Annotated[Principal, Depends(require("read"))],
    task: TaskFilter = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    action: Annotated[
        DecisionAction | None,
        Query(description="Only decisions of this action (`rollback`: why a task went back)."),
    ] = None,
) -> ORJSONResponse:
    """Decisions, newest first: rollbacks, promotions, re-arms, kills and lifts, with evidence."""
    with session_scope(request.app.state.engine) as session:
        return ORJSONResponse({"decisions": service.list_decisions(session, task, limit, action)})
