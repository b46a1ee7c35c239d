"""Webhook deliveries, for people to see what was sent and what failed (admin)."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit, urlunsplit

from fastapi import Depends, Query, Request

from controlplane.auth.dependencies import require
from controlplane.auth.service import Principal
from controlplane.db import session_scope
from controlplane.errors import error_responses
from controlplane.http import api_router
from controlplane.notify import repository
from controlplane.notify.schemas import DeliveriesOut, DeliveryOut, DeliveryStatus
from controlplane.params import TaskFilter

router = api_router("/v1/webhooks", tag="webhooks")


@router.get(
    "/deliveries", response_model=DeliveriesOut, responses=error_responses(401, 403, 422, 429, 503)
)
def list_deliveries(
    request: Request,
    _: Annotated[Principal, Depends(require("admin"))],
    status: DeliveryStatus | None = None,
    task: TaskFilter = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> DeliveriesOut:
    """Recent webhook deliveries, newest first, with their status and last error; counts per status."""
    with session_scope(request.app.state.engine) as session:
        rows = repository.list_deliveries(session, status=status, task=task, limit=limit)
        counts = repository.delivery_counts(session)
    return DeliveriesOut(
        deliveries=[
            DeliveryOut(
                delivery_id=d.delivery_id,
                event_id=e.id,
                kind=e.kind,
                task=e.task,
                url=_without_password(d.url),
                status=d.status,
                attempts=d.attempts,
                last_error=d.last_error,
                created_at=d.created_at,
                updated_at=d.updated_at,
                next_attempt_at=d.next_attempt_at if d.status == "pending" else None,
                delivered_at=d.delivered_at,
            )
            for d, e in rows
        ],
        counts=counts,
    )


def _without_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))
