"""Rollout endpoints (thin): flags, the gate, stage actions, the kill switch, decisions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session

from controlplane.auth.dependencies import require
from controlplane.auth.service import Principal
from controlplane.db import session_scope
from controlplane.http import ORJSONResponse
from controlplane.metrics.service import runtimes
from controlplane.models import Decision, Task
from controlplane.rollout import flags, service

router = APIRouter(prefix="/v1/flags", tags=["flags"])


@router.get("")
def all_flags(
    request: Request, _: Annotated[Principal, Depends(require("flags:read"))]
) -> Response:
    """Every task's routing flag and the global revision; ETag, and 304 for If-None-Match."""
    with session_scope(request.app.state.engine) as session:
        body = flags.canonical(flags.flags_document(session))
    tag = flags.etag(body)
    headers = {"ETag": tag, "Cache-Control": "no-cache"}
    if tag in request.headers.get("if-none-match", ""):
        return Response(status_code=304, headers=headers)
    return Response(body, media_type="application/json", headers=headers)


@router.get("/{task}")
def one_flag(
    task: str, request: Request, _: Annotated[Principal, Depends(require("flags:read"))]
) -> Response:
    """One task's routing flag."""
    with session_scope(request.app.state.engine) as session:
        document = flags.flag_of(session, task)
    if document is None:
        raise HTTPException(404, f"task: no flag for {task!r}; unknown tasks route to the cloud")
    return Response(flags.canonical(document), media_type="application/json")


tasks_router = APIRouter(prefix="/v1/tasks", tags=["rollout"])
decisions_router = APIRouter(prefix="/v1/decisions", tags=["rollout"])
kill_router = APIRouter(prefix="/v1/kill", tags=["rollout"])


class ActionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field(min_length=1, max_length=2000)
    force: bool = False


class UnblockIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = Field(min_length=1, max_length=200)
    reason: str = Field(min_length=1, max_length=2000)


class KillIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field(min_length=1, max_length=2000)


def _act(request: Request, task: str, work: Callable[[Session, Task, Any], Any]) -> Any:
    """Run a stage action on a task in one transaction; errors become their HTTP answers."""
    try:
        with session_scope(request.app.state.engine) as session:
            found = runtimes(session)
            match = next(((t, rt) for t, rt in found.values() if t.name == task), None)
            if match is None:
                raise HTTPException(404, f"task: no task {task!r}")
            return work(session, match[0], match[1].config)
    except service.StageError as exc:
        raise HTTPException(exc.status, exc.detail) from None


def _decided(request: Request, decision: Decision, task: str | None) -> ORJSONResponse:
    view = service.decision_view(decision, task)
    request.app.state.notifier.decisions([view])
    return ORJSONResponse(view)


@tasks_router.get("/{task}/gate")
def get_gate(
    task: str, request: Request, _: Annotated[Principal, Depends(require("read"))]
) -> ORJSONResponse:
    """The promotion gate's verdict per judged bucket over the windows closed in the stage."""
    return ORJSONResponse(_act(request, task, lambda s, t, c: service.gate(s, t, c)))


@tasks_router.post("/{task}/promote")
def promote(
    task: str,
    body: ActionIn,
    request: Request,
    who: Annotated[Principal, Depends(require("admin"))],
) -> ORJSONResponse:
    """Move the task one stage on (cloud → shadow → canary steps → full); 409 with the gate's
    verdict or the error-cost veto when blocked; `force` overrides the gate, never the veto."""
    veto = request.app.state.settings.error_cost_veto
    decision = _act(
        request,
        task,
        lambda s, t, c: service.promote(
            s, t, c, actor=who.name, reason=body.reason, force=body.force, veto=veto
        ),
    )
    return _decided(request, decision, task)


@tasks_router.post("/{task}/rollback")
def rollback(
    task: str,
    body: ActionIn,
    request: Request,
    who: Annotated[Principal, Depends(require("admin"))],
) -> ORJSONResponse:
    """Send the task back to the cloud now (stage rolled_back), with a reason."""
    decision = _act(
        request, task, lambda s, t, c: service.rollback(s, t, c, actor=who.name, reason=body.reason)
    )
    return _decided(request, decision, task)


@tasks_router.post("/{task}/rearm")
def rearm(
    task: str,
    body: ActionIn,
    request: Request,
    who: Annotated[Principal, Depends(require("admin"))],
) -> ORJSONResponse:
    """Re-arm a rolled-back task to shadow; its evidence starts over."""
    decision = _act(
        request, task, lambda s, t, c: service.rearm(s, t, c, actor=who.name, reason=body.reason)
    )
    return _decided(request, decision, task)


@tasks_router.post("/{task}/unblock")
def unblock(
    task: str,
    body: UnblockIn,
    request: Request,
    who: Annotated[Principal, Depends(require("admin"))],
) -> ORJSONResponse:
    """Lift the auto-promotion block a rollback put on an edge model version."""
    return ORJSONResponse(
        _act(
            request,
            task,
            lambda s, t, c: service.unblock(
                s, t, model=body.model, actor=who.name, reason=body.reason
            ),
        )
    )


@kill_router.post("")
def kill(
    body: KillIn, request: Request, who: Annotated[Principal, Depends(require("admin"))]
) -> ORJSONResponse:
    """The global kill switch: every flag says cloud (edge_percent 0, shadow_rate 0) until lifted."""
    return _switch(request, body, who, killed=True)


@kill_router.post("/lift")
def lift(
    body: KillIn, request: Request, who: Annotated[Principal, Depends(require("admin"))]
) -> ORJSONResponse:
    """Lift the kill switch: every flag goes back to its stage."""
    return _switch(request, body, who, killed=False)


def _switch(request: Request, body: KillIn, who: Principal, *, killed: bool) -> ORJSONResponse:
    try:
        with session_scope(request.app.state.engine) as session:
            decision = service.set_killed(
                session, runtimes(session), killed=killed, actor=who.name, reason=body.reason
            )
    except service.StageError as exc:
        raise HTTPException(exc.status, exc.detail) from None
    return _decided(request, decision, None)


@decisions_router.get("")
def decisions(
    request: Request,
    _: Annotated[Principal, Depends(require("read"))],
    task: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> ORJSONResponse:
    """Decisions, newest first: rollbacks, promotions, re-arms, kills and lifts, with evidence."""
    with session_scope(request.app.state.engine) as session:
        return ORJSONResponse({"decisions": service.list_decisions(session, task, limit)})
