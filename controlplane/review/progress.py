"""A reviewer's progress, as the dashboard's review page shows it beside the queue's counts
(`actions.queue_overview`): how many labels this reviewer gave today (UTC) per task, and
the task's reviewer agreement (`agreement.task_agreement`).

Nothing here names a side: agreement is read over resolved verdicts but answers only
alpha, kappa and shares."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from controlplane.models import ReviewLabel, Task
from controlplane.review import repository
from controlplane.review.agreement import task_agreement


def reviewer_progress(
    session: Session,
    reviewer: str,
    now: datetime,
    task: str | None = None,
    since: datetime | None = None,
) -> list[dict[str, Any]]:
    """Per task (the named one, or every task, by name): `mine_today`, the labels the
    reviewer gave since midnight UTC, and `agreement`, the task's reviewer agreement; with
    `since` (the start of a review session), `mine_since`, the labels they gave from then."""
    day_start = now.replace(hour=0, minute=0, second=0, microsecond=0)
    query = select(Task.id, Task.name).order_by(Task.name)
    if task is not None:
        query = query.where(Task.name == task)
    tasks = list(session.execute(query))
    ids = [tid for tid, _ in tasks]
    mine = _labels_by_task(session, ids, reviewer, day_start)
    mine_since = _labels_by_task(session, ids, reviewer, since) if since is not None else {}
    return [
        {
            "task": name,
            "mine_today": mine.get(tid, 0),
            **({"mine_since": mine_since.get(tid, 0)} if since is not None else {}),
            "agreement": task_agreement(session, tid),
        }
        for tid, name in tasks
    ]


def _labels_by_task(
    session: Session, task_ids: list[int], reviewer: str, since: datetime
) -> dict[int, int]:
    rows = session.execute(
        select(ReviewLabel.task_id, func.count())
        .where(
            ReviewLabel.task_id.in_(task_ids),
            ReviewLabel.reviewer == reviewer,
            ReviewLabel.created_at >= since,
        )
        .group_by(ReviewLabel.task_id)
    )
    return {tid: int(n) for tid, n in rows}


def regression_counts(session: Session, task_ids: Sequence[int]) -> dict[int, dict[str, int]]:
    """Per task with an active block: `labelled` and `needed` of the regression items the
    earliest blocking rollback and later ones queued (every regression item when a block
    names no rollback). No model is named: what a `review` key may read."""
    out: dict[int, dict[str, int]] = {}
    for task_id in task_ids:
        blocks = repository.active_blocks(session, task_id)
        if not blocks:
            continue
        decisions = [b.decision_id for b in blocks]
        since = None if None in decisions else min(d for d in decisions if d is not None)
        done, total = repository.rollback_counts(session, task_id, since)
        out[task_id] = {"labelled": done, "needed": total}
    return out
