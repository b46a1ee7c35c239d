"""Reading the audit log (thin: parse the filters, call the service, answer)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query, Request

from controlplane.audit import service
from controlplane.audit.schemas import AuditOut
from controlplane.auth.dependencies import require
from controlplane.auth.service import Principal
from controlplane.db import session_scope
from controlplane.errors import error_responses
from controlplane.http import ORJSONResponse, api_router
from controlplane.params import TaskFilter, text_filter
from controlplane.timeutil import UTCTime

router = api_router("/v1/audit", tag="audit")


@router.get("", response_model=AuditOut, responses=error_responses(401, 403, 422, 429, 503))
def list_audit(
    request: Request,
    _: Annotated[Principal, Depends(require("read"))],
    task: TaskFilter = None,
    actor: Annotated[str | None, text_filter(200, "Only this actor's entries.")] = None,
    since: UTCTime | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> ORJSONResponse:
    """Who changed what and when, newest first (filters: task, actor, since)."""
    with session_scope(request.app.state.engine) as session:
        rows = service.entries(session, task=task, actor=actor, since=since, limit=limit)
        entries = [
            {
                "id": e.id,
                "created_at": e.created_at,
                "actor": e.actor,
                "action": e.action,
                "task": e.task,
                "details": e.details,
            }
            for e in rows
        ]
    return ORJSONResponse({"entries": entries})
