"""Alert endpoints (thin): list, acknowledge."""

from __future__ import annotations

from typing import Annotated

from fastapi import Body, Depends, Query, Request

from controlplane.alerts import actions, service
from controlplane.alerts.schemas import AckIn, AlertOut, AlertsOut
from controlplane.auth.dependencies import require
from controlplane.auth.service import Principal
from controlplane.db import session_scope
from controlplane.errors import error_responses
from controlplane.http import ORJSONResponse, api_router
from controlplane.params import Int4Id, TaskFilter

router = api_router("/v1/alerts", tag="alerts")


@router.get("", response_model=AlertsOut, responses=error_responses(401, 403, 422, 429, 503))
def list_alerts(
    request: Request,
    _: Annotated[Principal, Depends(require("read"))],
    task: TaskFilter = None,
    state: Annotated[str | None, Query(pattern="^(open|acknowledged|resolved)$")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> ORJSONResponse:
    """Alerts, newest first; filter by task and state (open, acknowledged, resolved)."""
    with session_scope(request.app.state.engine) as session:
        return ORJSONResponse(
            {"alerts": service.list_alerts(session, task=task, state=state, limit=limit)}
        )


@router.post(
    "/{alert_id}/ack",
    response_model=AlertOut,
    responses=error_responses(401, 403, 404, 413, 422, 429, 503),
)
def acknowledge(
    alert_id: Int4Id,
    request: Request,
    principal: Annotated[Principal, Depends(require("admin"))],
    body: Annotated[AckIn | None, Body()] = None,
) -> ORJSONResponse:
    """Acknowledge an open alert (audited); it still resolves by itself when the condition clears."""
    return ORJSONResponse(
        actions.acknowledge(
            request.app.state.engine,
            alert_id,
            actor=principal.name,
            note=body.note if body else None,
        )
    )
