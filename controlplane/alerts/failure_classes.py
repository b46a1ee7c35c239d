"""The `new_failure_class` alert: reviewers named a failure class the task's labels never
had before (docs/route-accuracy.md).

The alert is attached to the route-accuracy window whose labels first named the class. It
stays open (at most one per task, like every kind) while that window is open for labels; a
further new class meanwhile is announced as an update of it (its value counts the classes
named, its window moves to the newest); it resolves at the first refresh after that
window closed, by then the classes are part of the task's record. Every change goes to
the outbox in the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.alerts.service import ACTIVE, AlertEvent
from controlplane.models import Alert, Task
from controlplane.models.base import utcnow
from controlplane.notify.documents import alert_document
from controlplane.notify.outbox import add_event

KIND = "new_failure_class"


def _active(session: Session, task_id: int) -> Alert | None:
    return session.scalars(
        select(Alert).where(Alert.task_id == task_id, Alert.kind == KIND, Alert.state.in_(ACTIVE))
    ).one_or_none()


def _sentence(task: str, classes: Sequence[str], window_start: datetime) -> str:
    named = ", ".join(classes)
    return (
        f"{task}: reviewers named {'a failure class' if len(classes) == 1 else 'failure classes'}"
        f" its labels never had before: {named} (route-accuracy window from "
        f"{window_start:%Y-%m-%d %H:%M} UTC)"
    )


def _announce(session: Session, event: AlertEvent) -> AlertEvent:
    add_event(session, kind="alert", task=event.task, document=alert_document(event))
    return event


def open_new_classes(
    session: Session, task: Task, window_start: datetime, classes: Sequence[str]
) -> AlertEvent:
    """Raise the alert for classes first named in the window starting at `window_start`; an
    alert already active takes them in (announced as `updated`)."""
    now = utcnow()
    active = _active(session, task.id)
    if active is None:
        alert = Alert(
            task_id=task.id,
            kind=KIND,
            state="open",
            window_start=window_start,
            value=float(len(classes)),
            baseline=None,
            message=_sentence(task.name, classes, window_start),
            opened_at=now,
            updated_at=now,
        )
        session.add(alert)
        session.flush()
        return _announce(session, AlertEvent(alert.id, task.name, KIND, "opened", alert.message))
    # value: how many classes the alert has named in all.
    active.value = (active.value or 0.0) + len(classes)
    active.window_start = max(active.window_start, window_start)
    active.message = _sentence(task.name, classes, window_start)
    active.updated_at = now
    session.flush()
    return _announce(session, AlertEvent(active.id, task.name, KIND, "updated", active.message))


def resolve_closed(
    session: Session, task: Task, closed: Callable[[datetime], bool]
) -> AlertEvent | None:
    """Resolve the task's active alert when the window it is attached to (by its start)
    has closed."""
    active = _active(session, task.id)
    if active is None or not closed(active.window_start):
        return None
    now = utcnow()
    active.state, active.resolved_at, active.updated_at = "resolved", now, now
    session.flush()
    return _announce(session, AlertEvent(active.id, task.name, KIND, "resolved", active.message))
