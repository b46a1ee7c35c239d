"""Review endpoints (thin): the blind queue, labels, skips and releases. Each calls its
action in `controlplane.review.actions`; an `ActionError` becomes its HTTP answer."""

from __future__ import annotations

from typing import Annotated

from fastapi import Body, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from controlplane.auth.dependencies import require
from controlplane.auth.service import Principal
from controlplane.errors import error_responses
from controlplane.http import ORJSONResponse, api_router
from controlplane.params import TASK_NAME_PATTERN, Int8Id
from controlplane.review import actions
from controlplane.review.schemas import (
    LabelIn,
    LabelOut,
    NextOut,
    QueueOut,
    ReleaseIn,
    ReleaseOut,
)

router = api_router("/v1/review", tag="review")

TaskName = Annotated[
    str | None, Query(pattern=TASK_NAME_PATTERN, description="Only this task's items.")
]


@router.get(
    "/next",
    response_model=NextOut,
    responses={
        204: {"description": "Nothing to review for this reviewer now."},
        **error_responses(401, 403, 404, 409, 422, 429, 503),
    },
)
async def next_item(
    request: Request,
    principal: Annotated[Principal, Depends(require("review"))],
    task: TaskName = None,
) -> Response:
    """Claim the next item to review (a lease, 10 minutes by default; the item you already
    hold, of any task, if you hold one); 204 when none; 409 for a task that keeps no text
    (payload_policy none), which has no queue."""
    view = await run_in_threadpool(
        lambda: actions.claim(
            request.app.state.engine,
            task,
            principal.name,
            lease_seconds=request.app.state.settings.review_lease_seconds,
        )
    )
    if view is None:
        return Response(status_code=204)
    return ORJSONResponse({"item": view})


@router.post(
    "/{item_id}/label",
    response_model=LabelOut,
    responses=error_responses(401, 403, 404, 409, 413, 422, 429, 503),
)
async def label_item(
    item_id: Int8Id,
    body: LabelIn,
    request: Request,
    principal: Annotated[Principal, Depends(require("review"))],
) -> ORJSONResponse:
    """Label the item you hold, or label again an item you labelled (your correction,
    which supersedes your earlier label); 409 when you hold no lease on an item you have
    not labelled (it expired or is someone else's)."""
    out = await run_in_threadpool(
        lambda: actions.label(
            request.app.state.engine,
            item_id,
            principal.name,
            verdict=body.verdict,
            failure_class=body.failure_class,
            corrected=body.corrected,
            note=body.note,
        )
    )
    return ORJSONResponse(out)


@router.post(
    "/{item_id}/release",
    response_model=ReleaseOut,
    responses=error_responses(401, 403, 404, 409, 413, 422, 429, 503),
)
async def release_item(
    item_id: Int8Id,
    request: Request,
    principal: Annotated[Principal, Depends(require("review"))],
    body: Annotated[ReleaseIn | None, Body()] = None,
) -> ORJSONResponse:
    """Give the item back; `skip` (or a reason) keeps it from being offered to you again."""
    body = body or ReleaseIn()
    out = await run_in_threadpool(
        lambda: actions.release(
            request.app.state.engine,
            item_id,
            principal.name,
            skip=body.skip,
            reason=body.reason,
        )
    )
    return ORJSONResponse(out)


@router.get(
    "/queue",
    response_model=QueueOut,
    responses=error_responses(401, 403, 404, 422, 429, 503),
)
async def queue(
    request: Request,
    _: Annotated[Principal, Depends(require("review"))],
    task: TaskName = None,
) -> ORJSONResponse:
    """Per task: items queued, claimed, labelled today, done, and with a model blocked its
    regression items labelled of needed; tasks without a queue say why."""
    rows = await run_in_threadpool(actions.queue_overview, request.app.state.engine, task)
    return ORJSONResponse({"tasks": rows})
