"""Flag endpoints (thin): every task's flag with the global revision, or one task's."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import Response

from controlplane.auth.dependencies import require
from controlplane.auth.service import Principal
from controlplane.db import session_scope
from controlplane.rollout import flags

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
        document = flags.flags_document(session)["flags"].get(task)
    if document is None:
        raise HTTPException(404, f"task: no flag for {task!r}; unknown tasks route to the cloud")
    return Response(flags.canonical(document), media_type="application/json")
