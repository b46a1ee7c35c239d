"""A reviewer's progress, as the dashboard's review page shows it beside the queue's counts
(`actions.queue_overview`): how many labels this reviewer gave today (UTC) per task, and
the task's reviewer agreement (`agreement.task_agreement`).

Nothing here names a side: agreement is read over resolved verdicts but answers only
alpha, kappa and shares."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from controlplane.models import ReviewLabel, Task
from controlplane.review.agreement import task_agreement


def reviewer_progress(
    session: Session, reviewer: str, now: datetime, task: str | None = None
) -> list[dict[str, Any]]:
    """Per task (the named one, or every task, by name): `mine_today`, the labels the
    reviewer gave since midnight UTC, and `agreement`, the task's reviewer agreement."""
    day_start = now.replace(hour=0, minute=0, second=0, microsecond=0)
    query = select(Task.id, Task.name).order_by(Task.name)
    if task is not None:
        query = query.where(Task.name == task)
    tasks = list(session.execute(query))
    mine = dict(
        session.execute(
            select(ReviewLabel.task_id, func.count())
            .where(
                ReviewLabel.task_id.in_([tid for tid, _ in tasks]),
                ReviewLabel.reviewer == reviewer,
                ReviewLabel.created_at >= day_start,
            )
            .group_by(ReviewLabel.task_id)
        ).all()
    )
    return [
        {
            "task": name,
            "mine_today": int(mine.get(tid, 0)),
            "agreement": task_agreement(session, tid),
        }
        for tid, name in tasks
    ]
