"""Task catalog endpoints (thin): the task list. Applying a config publishes a flag, and one
task's view shows its flag and metrics, so those two live in `controlplane.rollout.endpoints`."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from controlplane.auth.dependencies import require
from controlplane.auth.service import Principal
from controlplane.catalog import service
from controlplane.catalog.schemas import TasksOut
from controlplane.db import session_scope
from controlplane.errors import error_responses
from controlplane.http import ORJSONResponse, api_router

router = api_router("/v1/tasks", tag="tasks")


@router.get("", response_model=TasksOut, responses=error_responses(401, 403, 429, 503))
def list_tasks(
    request: Request, _: Annotated[Principal, Depends(require("read"))]
) -> ORJSONResponse:
    """Every task with its stage and current config."""
    with session_scope(request.app.state.engine) as session:
        return ORJSONResponse({"tasks": service.list_task_views(session)})
