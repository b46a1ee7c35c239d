"""Task catalog endpoints (thin: parse, call the service, answer)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from controlplane.auth.dependencies import require
from controlplane.auth.service import Principal
from controlplane.catalog import repository, service
from controlplane.catalog.schemas import ConfigError, read_documents
from controlplane.db import session_scope
from controlplane.http import ORJSONResponse, read_body

router = APIRouter(prefix="/v1/tasks", tags=["tasks"])


@router.post("", responses={200: {"description": "unchanged"}, 201: {"description": "new version"}})
async def apply_task(
    request: Request, principal: Annotated[Principal, Depends(require("admin"))]
) -> Response:
    """Register a task or give it a new config version (JSON, or YAML with a YAML content type)."""
    body = await read_body(request, request.app.state.settings.max_body_bytes)
    raw = _parse(body, request.headers.get("content-type", ""))

    def apply() -> service.Applied:
        with session_scope(request.app.state.engine) as session:
            return service.apply_config(session, raw, actor=principal.name)

    try:
        applied = await run_in_threadpool(apply)
    except ConfigError as exc:
        raise HTTPException(422, exc.errors) from None
    except service.TaskConflict as exc:
        raise HTTPException(409, str(exc)) from None
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


@router.get("")
def list_tasks(
    request: Request, _: Annotated[Principal, Depends(require("read"))]
) -> ORJSONResponse:
    """Every task with its stage and current config."""
    with session_scope(request.app.state.engine) as session:
        return ORJSONResponse({"tasks": service.list_task_views(session)})


@router.get("/{task}")
def get_task(
    task: str, request: Request, _: Annotated[Principal, Depends(require("read"))]
) -> ORJSONResponse:
    """One task: config, stage, version, its flag and its latest closed window (`all`)."""
    from controlplane.metrics.service import latest_closed_rows
    from controlplane.rollout.flags import flag_of

    with session_scope(request.app.state.engine) as session:
        view = service.task_view(session, task)
        if view is None:
            raise HTTPException(404, f"task {task!r} is not registered")
        view["flag"] = flag_of(session, task)
        found = repository.task_by_name(session, task)
        rows = latest_closed_rows(session, found.id) if found is not None else []
        view["latest_window"] = next((r for r in rows if r["bucket"] == "all"), None)
    return ORJSONResponse(view)
