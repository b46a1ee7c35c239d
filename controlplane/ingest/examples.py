"""Example results of a task in a time range and length bucket, each as GET
/v1/results/{task}/{request_id} gives it (with the payload its policy kept): what a
decision's breaching windows looked like."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from controlplane.catalog import repository as catalog
from controlplane.ingest.buckets import bucket_labels
from controlplane.ingest.repository import result_view
from controlplane.models import Result

# "all" (or None) is every bucket.
ALL = "all"


def token_range(bucket: str, boundaries: Sequence[int]) -> tuple[int, int | None]:
    """The input token counts of a length bucket: [low, high) (high None: no end).
    ValueError for a name that is no bucket of these boundaries."""
    labels = bucket_labels(boundaries)
    if bucket not in labels:
        raise ValueError(f"bucket: {bucket!r} is not one of {', '.join(labels)}")
    index = labels.index(bucket)
    edges = [0, *boundaries]
    return edges[index], (boundaries[index] if index < len(boundaries) else None)


def has_results(session: Session, task: str, *, since: datetime, until: datetime) -> bool:
    """Whether the task has any result with `since <= ts < until` (one index probe)."""
    found = catalog.task_by_name(session, task)
    if found is None:
        return False
    first = session.scalar(
        select(Result.id)
        .where(Result.task_id == found.id, Result.ts >= since, Result.ts < until)
        .limit(1)
    )
    return first is not None


def results_in(
    session: Session,
    task: str,
    *,
    since: datetime,
    until: datetime,
    bucket: str | None = None,
    boundaries: Sequence[int] = (),
    bad_only: bool = True,
    limit: int = 5,
) -> list[dict[str, Any]]:
    """Up to `limit` results of the task with `since <= ts < until`, oldest first, in the
    length bucket (by input tokens under `boundaries`, as the windows count them); with
    `bad_only`, those a breach is made of (conflict, invalid, edge error or invalid output,
    degraded). Each in the shape of `result_view`."""
    found = catalog.task_by_name(session, task)
    if found is None:
        return []
    where = [Result.task_id == found.id, Result.ts >= since, Result.ts < until]
    if bucket is not None and bucket != ALL:
        low, high = token_range(bucket, boundaries)
        where.append(Result.input_tokens >= low)
        if high is not None:
            where.append(Result.input_tokens < high)
    if bad_only:
        where.append(
            or_(
                Result.outcome.in_(("conflict", "invalid")),
                Result.edge_error.is_not(None),
                Result.edge_valid.is_(False),
                Result.degraded.is_(True),
            )
        )
    ids = session.scalars(
        select(Result.request_id).where(*where).order_by(Result.ts, Result.id).limit(limit)
    )
    views = [result_view(session, task, request_id) for request_id in ids]
    return [view for view in views if view is not None]
