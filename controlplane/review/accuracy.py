"""Route-accuracy windows from labels, and the `new_failure_class` alert
(docs/route-accuracy.md).

A window stays open until its end plus `route_acc_lateness_seconds`, since people label
late; each pass recomputes the open ones, and closed ones never change (the `route_acc`
and `failure_class` rules read only those). Items are weighted by 1/inclusion probability.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, literal, select
from sqlalchemy.orm import Session

from controlplane.alerts import failure_classes
from controlplane.alerts.service import AlertEvent
from controlplane.catalog.service import runtimes
from controlplane.ingest.buckets import bucket_labels
from controlplane.metrics.windows import boundary_after, span_for
from controlplane.models import ReviewItem, ReviewLabel, RouteAccuracyWindow, Task
from controlplane.review.estimate import LabelledPair, RouteAccuracy, route_accuracy
from controlplane.review.labels import consensus, votes


def _open_since(session: Session, task_id: int) -> datetime | None:
    """The end of the newest closed window: results before it belong to frozen windows."""
    return session.scalar(
        select(func.max(RouteAccuracyWindow.window_end)).where(
            RouteAccuracyWindow.task_id == task_id, RouteAccuracyWindow.closed_at.is_not(None)
        )
    )


@dataclass(frozen=True, slots=True)
class Drawn:
    """What route accuracy reads of a review item (not its payload copy)."""

    id: int
    result_ts: datetime
    bucket: str
    kind: str
    state: str
    decision: str
    inclusion_probability: float
    reason: str = ""


@dataclass(slots=True)
class Vote:
    """What consensus reads of a label."""

    id: int
    reviewer: str
    resolved: str
    failure_class: str | None
    corrected: Any
    created_at: datetime


def _items(
    session: Session, task_id: int, since: datetime | None
) -> tuple[list[Drawn], dict[int, list[Vote]]]:
    """The task's review items with results from `since` on, and their labels by item."""
    where: list[Any] = [ReviewItem.task_id == task_id]
    if since is not None:
        where.append(ReviewItem.result_ts >= since)
    items = [
        Drawn(*row)
        for row in session.execute(
            select(
                ReviewItem.id,
                ReviewItem.result_ts,
                ReviewItem.bucket,
                ReviewItem.kind,
                ReviewItem.state,
                ReviewItem.decision,
                ReviewItem.inclusion_probability,
                ReviewItem.reason,
            )
            .where(*where)
            .order_by(ReviewItem.id)
        )
    ]
    labels: dict[int, list[Vote]] = defaultdict(list)
    if items:
        found = session.execute(
            select(
                ReviewLabel.item_id,
                ReviewLabel.id,
                ReviewLabel.reviewer,
                ReviewLabel.resolved,
                ReviewLabel.failure_class,
                # consensus carries a correction along; route accuracy never reads it
                literal(None),
                ReviewLabel.created_at,
            )
            .join(ReviewItem, ReviewItem.id == ReviewLabel.item_id)
            .where(*where)
            .order_by(ReviewLabel.id)
        )
        for item_id, label_id, reviewer, resolved, failure_class, corrected, at in found:
            labels[item_id].append(Vote(label_id, reviewer, resolved, failure_class, corrected, at))
    return items, labels


def judged_buckets(boundaries: Sequence[int], max_input_tokens: int | None) -> set[str]:
    """The buckets the edge may serve (starting at or under the cap), as the rollback rules
    judge them (rollout.policy.judged_buckets, which sits above this layer)."""
    labels = bucket_labels(boundaries)
    if max_input_tokens is None:
        return set(labels)
    starts = [0, *boundaries]
    return {label for label, lo in zip(labels, starts, strict=True) if lo <= max_input_tokens}


def window_accuracy(
    items: list[Drawn], labels: dict[int, list[Vote]], judged: set[str] | None = None
) -> RouteAccuracy:
    """The route accuracy of one window's items; with `judged`, only pairs of those buckets
    count (the others' classes are still named)."""
    pairs = []
    named: set[str] = set()
    for item in items:
        mine = labels.get(item.id, [])
        # Each reviewer's newest label is their vote: classes of superseded labels are not
        # the task's classes (a reviewer correcting a label must not mint new ones).
        named.update(lab.failure_class for lab in votes(mine) if lab.failure_class)
        if item.kind != "pair" or item.state != "done" or item.reason == "regression":
            # A rollback queues every result of its breaching windows (reason `regression`):
            # a census of the worst windows, not a draw, so it would outweigh them. The
            # items the sampler drew there (moved to the regression layer, keeping their
            # reason and probability) still count.
            continue
        if judged is not None and item.bucket not in judged:
            continue
        verdict = consensus(mine)
        if verdict is None:
            continue
        pairs.append(
            LabelledPair(
                decision=item.decision,
                resolved=verdict.resolved,
                inclusion_probability=item.inclusion_probability,
                failure_class=verdict.failure_class,
            )
        )
    return route_accuracy(pairs, other_classes=sorted(named))


def _known_classes(session: Session, task_id: int) -> set[str]:
    """Every failure class the task's route-accuracy windows have recorded."""
    known: set[str] = set()
    for classes in session.scalars(
        select(RouteAccuracyWindow.failure_classes).where(RouteAccuracyWindow.task_id == task_id)
    ):
        known.update(classes or {})
    return known


def refresh_route_accuracy(session: Session, task_id: int, now: datetime) -> list[AlertEvent]:
    """Recompute the task's open route-accuracy windows from its labels, close those past
    `route_acc_lateness_seconds`, and raise `new_failure_class` alerts (written to the
    outbox here); returns the alert events."""
    found = runtimes(session).get(task_id)
    if found is None:
        return []
    task, runtime = found
    # One refresh of a task at a time: the windows and the alert are read, then written.
    session.execute(select(Task.id).where(Task.id == task.id).with_for_update())
    review = runtime.config.review
    seconds, lateness = review.route_acc_window_seconds, review.route_acc_lateness_seconds

    config = runtime.config
    judged = judged_buckets(config.length_buckets, config.max_input_tokens)
    since = _open_since(session, task.id)
    items, labels = _items(session, task.id, since)
    # Windows made before `route_acc_window_seconds` changed keep their spans, as result
    # windows do (metrics.windows.placed): an item goes to the window holding its time, else
    # to a new one of the current length cut where a made one begins; none to a closed one.
    made = {
        (row.window_start, row.window_end): row.closed_at is not None
        for row in session.scalars(
            select(RouteAccuracyWindow)
            .where(RouteAccuracyWindow.task_id == task.id)
            .where(RouteAccuracyWindow.window_end > min((i.result_ts for i in items), default=now))
            .order_by(RouteAccuracyWindow.window_start)
        )
    }
    spans = list(made)
    ends: dict[datetime, datetime] = dict(spans)
    by_window: dict[datetime, list[Drawn]] = defaultdict(list)
    for item in items:
        start, end = span_for(item.result_ts, seconds, spans)
        if made.get((start, end)):
            continue  # a closed window's figures never change
        ends.setdefault(start, end)
        by_window[start].append(item)

    def closed(start: datetime) -> bool:
        end = ends.get(start)
        if end is None:  # an alert's window, made before this pass's (read once)
            end = session.scalar(
                select(RouteAccuracyWindow.window_end).where(
                    RouteAccuracyWindow.task_id == task.id,
                    RouteAccuracyWindow.window_start == start,
                )
            ) or boundary_after(start, seconds)
            ends[start] = end
        return end + timedelta(seconds=lateness) <= now

    stored = {
        row.window_start: row
        for row in session.scalars(
            select(RouteAccuracyWindow).where(
                RouteAccuracyWindow.task_id == task.id,
                RouteAccuracyWindow.closed_at.is_(None),
            )
        )
    }
    for start, open_row in stored.items():
        ends.setdefault(start, open_row.window_end)
    known = _known_classes(session, task.id)
    events: list[AlertEvent] = []
    # Before this pass's windows: an alert opened for a window that closes in this very
    # pass stays open until the next one, so it is seen open at least once.
    resolved = failure_classes.resolve_closed(session, task, closed)
    if resolved is not None:
        events.append(resolved)
    for start in sorted(by_window.keys() | stored.keys()):
        accuracy = window_accuracy(by_window.get(start, []), labels, judged)
        row = stored.get(start)
        if row is None:
            row = RouteAccuracyWindow(task_id=task.id, window_start=start, window_end=ends[start])
            session.add(row)
        row.n_labels, row.n_unclear = accuracy.n_labels, accuracy.n_unclear
        row.estimate, row.n_effective = accuracy.estimate, accuracy.n_effective
        row.low, row.high = accuracy.low, accuracy.high
        row.missed_offload, row.wrong_offload = accuracy.missed_offload, accuracy.wrong_offload
        row.failure_classes = accuracy.failure_classes
        row.config_version = task.config_version
        row.computed_at = now
        if closed(start):
            row.closed_at = now
        new = sorted(set(accuracy.failure_classes) - known)
        if new:
            known.update(new)
            events.append(failure_classes.open_new_classes(session, task, start, new))
    session.flush()
    return events


def window_view(row: RouteAccuracyWindow) -> dict[str, Any]:
    return {
        "window_start": row.window_start,
        "window_end": row.window_end,
        "closed": row.closed_at is not None,
        "closed_at": row.closed_at,
        "estimate": row.estimate,
        "n_effective": row.n_effective,
        "low": row.low,
        "high": row.high,
        "missed_offload": row.missed_offload,
        "wrong_offload": row.wrong_offload,
        "n_labels": row.n_labels,
        "n_unclear": row.n_unclear,
        "failure_classes": row.failure_classes or {},
        "config_version": row.config_version,
        "computed_at": row.computed_at,
    }


def list_windows(session: Session, task_id: int, limit: int) -> list[dict[str, Any]]:
    """The task's route-accuracy windows, newest first."""
    rows = session.scalars(
        select(RouteAccuracyWindow)
        .where(RouteAccuracyWindow.task_id == task_id)
        .order_by(RouteAccuracyWindow.window_start.desc())
        .limit(limit)
    )
    return [window_view(row) for row in rows]
