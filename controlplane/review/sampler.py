"""The review sampler (docs/review.md). TODO(review helper): fill in."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from controlplane.catalog.schemas import TaskConfig
from controlplane.models import Task


def sample_closed_windows(session: Session, task_id: int, now: datetime) -> int:
    """Draw the review items of every closed, not yet sampled window of the task; returns
    how many items were queued."""
    return 0


def queue_regression(
    session: Session,
    task: Task,
    config: TaskConfig,
    *,
    decision_id: int,
    rule: str,
    cell: str,
    ranges: list[tuple[datetime, datetime]],
) -> int:
    """Queue the results of a rollback's breaching windows (cell `all` = the judged buckets)
    for the `regression` layer, in the caller's (the firing's) transaction."""
    return 0
