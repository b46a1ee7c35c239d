"""Grade endpoints (thin): a task's grade, every task's grade."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from controlplane.auth.dependencies import require
from controlplane.auth.service import Principal
from controlplane.db import session_scope
from controlplane.errors import error_responses
from controlplane.grading import service
from controlplane.grading.schemas import GradeOut, GradesOut
from controlplane.http import ORJSONResponse, api_router
from controlplane.models.base import utcnow
from controlplane.params import TaskName

router = api_router(tag="grading")


@router.get(
    "/v1/tasks/{task}/grade",
    response_model=GradeOut,
    responses=error_responses(401, 403, 404, 422, 429, 503),
)
def task_grade(
    task: TaskName, request: Request, _: Annotated[Principal, Depends(require("read"))]
) -> ORJSONResponse:
    """The task's grade of today: the kept one, else computed now and kept."""
    veto = request.app.state.settings.error_cost_veto
    with session_scope(request.app.state.engine) as session:
        found = service.current_grade(session, task, veto=veto, now=utcnow())
    return ORJSONResponse(found)


@router.get("/v1/grades", response_model=GradesOut, responses=error_responses(401, 403, 429, 503))
def grades(request: Request, _: Annotated[Principal, Depends(require("read"))]) -> ORJSONResponse:
    """Every task's grade of today, by task name (those not graded today are graded now)."""
    veto = request.app.state.settings.error_cost_veto
    with session_scope(request.app.state.engine) as session:
        found = service.current_grades(session, veto=veto, now=utcnow())
    return ORJSONResponse({"grades": found})
