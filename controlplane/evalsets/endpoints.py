"""Eval set endpoints (thin): backfill, list, items and export (blind to a key without
`read`), runs (`read`: a run names the model it scored)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, HTTPException, Query, Request, Response

from controlplane.auth.dependencies import require
from controlplane.auth.scopes import grants
from controlplane.auth.service import Principal
from controlplane.db import session_scope
from controlplane.errors import error_responses
from controlplane.evalsets import actions, service
from controlplane.evalsets.schemas import (
    BackfillIn,
    BackfillOut,
    EvalItemsOut,
    EvalSetsOut,
    Layer,
    RunIn,
    RunOut,
    RunsOut,
)
from controlplane.http import ORJSONResponse, api_router, json_body
from controlplane.params import INT8_MAX, TaskName, text_filter

router = api_router("/v1/evalsets", tag="evalsets")
NDJSON = "application/x-ndjson"
# Who reads eval sets: reviewers (the blind form) and `read` keys (the full form).
READERS = ("review", "read")


@router.post(
    "/backfill",
    response_model=BackfillOut,
    responses=error_responses(401, 403, 404, 413, 422, 429, 503),
)
def backfill(
    request: Request,
    principal: Annotated[Principal, Depends(require("review"))],
    body: BackfillIn | None = None,
) -> ORJSONResponse:
    """Backfill labelled review items into eval items (idempotent); answers what it added."""
    body = body or BackfillIn()
    return ORJSONResponse(
        actions.backfill(
            request.app.state.engine, task=body.task, layer=body.layer, actor=principal.name
        )
    )


@router.get("", response_model=EvalSetsOut, responses=error_responses(401, 403, 429, 503))
def list_sets(
    request: Request, _: Annotated[Principal, Depends(require(READERS))]
) -> ORJSONResponse:
    """Every task's eval set layers with counts and content hashes, and the manifest's hash."""
    with session_scope(request.app.state.engine) as session:
        return ORJSONResponse(service.sets(session))


@router.get(
    "/{task}/runs",
    response_model=RunsOut,
    responses=error_responses(401, 403, 404, 422, 429, 503),
)
def list_runs(
    task: TaskName,
    request: Request,
    _: Annotated[Principal, Depends(require("read"))],
    model: Annotated[str | None, text_filter(200, "Only this model's runs.")] = None,
) -> ORJSONResponse:
    """Stored runs of the task, newest first; `current` says whether each was on the layer as it is now."""
    with session_scope(request.app.state.engine) as session:
        try:
            found = service.task_named(session, task)
        except service.NotFound as exc:
            raise HTTPException(404, str(exc)) from None
        return ORJSONResponse({"runs": service.list_runs(session, found, model=model)})


@router.get(
    "/{task}/{layer}",
    response_model=EvalItemsOut,
    responses={
        200: {
            "description": "A page of items, or for Accept: application/x-ndjson the layer's "
            "exported JSONL, byte for byte; to a key without `read` the blind form.",
            "content": {NDJSON: {"schema": {"type": "string"}}},
        },
        **error_responses(401, 403, 404, 422, 429, 503),
    },
)
def layer_items(
    task: TaskName,
    layer: Layer,
    request: Request,
    principal: Annotated[Principal, Depends(require(READERS))],
    after: Annotated[int, Query(ge=0, le=INT8_MAX, description="Cursor from `next`.")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Response:
    """A layer's items in export order, paged (Accept: application/x-ndjson: the whole export); blind without `read`."""
    # A reviewer never learns which answer was the edge's: without `read` the blind form.
    blind = not grants(principal.scopes, "read")
    with session_scope(request.app.state.engine) as session:
        try:
            found = service.task_named(session, task)
            if NDJSON in request.headers.get("accept", ""):
                data = service.layer_bytes(session, found, layer, blind=blind)
                return Response(data, media_type=NDJSON)
            lines, cursor = service.page(
                session, found, layer, after=after, limit=limit, blind=blind
            )
        except service.NotFound as exc:
            raise HTTPException(404, str(exc)) from None
    return ORJSONResponse({"items": lines, "next": cursor})


@router.post(
    "/{task}/runs",
    response_model=RunOut,
    responses=error_responses(401, 403, 404, 409, 413, 422, 429, 503),
    # A run may be megabytes: read after the key, off the event loop (json_body).
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/RunIn"}}},
        }
    },
)
def store_run(
    task: TaskName,
    request: Request,
    principal: Annotated[Principal, Depends(require("read"))],
    body: Annotated[RunIn, Depends(json_body(RunIn))],
) -> ORJSONResponse:
    """Score and store a run of an edge model version on one layer (every item answered
    once); 409 while the layer is empty, or when the run does not answer each of its items
    once."""
    outputs: dict[str, Any] = {}
    twice = []
    for number, line in enumerate(body.lines):
        if line.id in outputs:
            twice.append(f"lines.{number}.id: {line.id}")
        outputs[line.id] = line.output
    return ORJSONResponse(
        actions.store_run(
            request.app.state.engine,
            task,
            layer=body.layer,
            model=body.model,
            outputs=outputs,
            actor=principal.name,
            note=body.note,
            twice=twice,
        )
    )
