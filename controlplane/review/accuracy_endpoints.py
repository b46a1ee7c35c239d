"""Route accuracy, reviewer agreement and comparator calibration of a task (read; thin)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Query, Request

from controlplane.auth.dependencies import require
from controlplane.auth.service import Principal
from controlplane.catalog.service import TaskRuntime, runtime_or_404
from controlplane.db import session_scope
from controlplane.errors import error_responses
from controlplane.http import ORJSONResponse, api_router
from controlplane.params import TaskName
from controlplane.review import accuracy, agreement, calibration
from controlplane.review.schemas import AgreementOut, CalibrationOut, RouteAccuracyOut

router = api_router("/v1/tasks", tag="review")

NO_LABELS = (
    "payload_policy is none: no text is kept, so nothing is reviewed and route accuracy "
    "stays insufficient (set payload_policy to full or redacted to review)"
)


def _note(runtime: TaskRuntime) -> str | None:
    return NO_LABELS if runtime.config.payload_policy == "none" else None


TASK_ERRORS = error_responses(401, 403, 404, 422, 429, 503)


@router.get("/{task}/route-accuracy", response_model=RouteAccuracyOut, responses=TASK_ERRORS)
def route_accuracy(
    task: TaskName,
    request: Request,
    _: Annotated[Principal, Depends(require("read"))],
    limit: Annotated[int, Query(ge=1, le=5000)] = 500,
) -> ORJSONResponse:
    """The task's route-accuracy windows from labels, newest first."""
    with session_scope(request.app.state.engine) as session:
        runtime = runtime_or_404(session, task)
        review = runtime.config.review
        body: dict[str, Any] = {
            "task": runtime.name,
            "window_seconds": review.route_acc_window_seconds,
            "lateness_seconds": review.route_acc_lateness_seconds,
            "note": _note(runtime),
            "windows": accuracy.list_windows(session, runtime.id, limit),
        }
        return ORJSONResponse(body)


@router.get("/{task}/review-agreement", response_model=AgreementOut, responses=TASK_ERRORS)
def review_agreement(
    task: TaskName, request: Request, _: Annotated[Principal, Depends(require("read"))]
) -> ORJSONResponse:
    """Reviewers' agreement on the task's labels: Krippendorff's alpha and Cohen's kappa."""
    with session_scope(request.app.state.engine) as session:
        runtime = runtime_or_404(session, task)
        found = agreement.task_agreement(session, runtime.id)
        return ORJSONResponse({"task": runtime.name, **found})


@router.get("/{task}/calibration", response_model=CalibrationOut, responses=TASK_ERRORS)
def comparator_calibration(
    task: TaskName, request: Request, _: Annotated[Principal, Depends(require("read"))]
) -> ORJSONResponse:
    """How often the comparator's conflicts were real and its agreements hid a difference."""
    with session_scope(request.app.state.engine) as session:
        runtime = runtime_or_404(session, task)
        body = {
            "task": runtime.name,
            "note": _note(runtime),
            "comparators": calibration.task_calibration(session, runtime.id),
        }
        return ORJSONResponse(body)
