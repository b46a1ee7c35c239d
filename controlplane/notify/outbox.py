"""The outbox: `add_event` writes a webhook event in the caller's transaction.

The event and whatever made it (a decision, an alert) commit together or not at all, so
nothing is announced that did not happen and nothing that happened goes unannounced.
After a commit that wrote events the delivery runners are kicked (`delivery.kick`).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Session

from controlplane.models import OutboxEvent
from controlplane.models.base import utcnow
from controlplane.notify.delivery import kick

KINDS = ("decision", "alert", "notice", "change")
_WROTE = "shadowplane.outbox.wrote"


def add_event(session: Session, *, kind: str, task: str | None, document: dict[str, Any]) -> int:
    """Write one event (kind: decision | alert | notice | change; document: the webhook body's
    content, from `notify.documents`) in this transaction; returns its id."""
    if kind not in KINDS:
        raise ValueError(f"kind: {kind!r} is not one of {', '.join(KINDS)}")
    row = OutboxEvent(kind=kind, task=task, document=document, created_at=utcnow())
    session.add(row)
    session.flush()
    session.info[_WROTE] = True
    return row.id


@event.listens_for(Session, "after_commit")
def _kick_after_commit(session: Session) -> None:
    if session.info.pop(_WROTE, False):
        kick()


@event.listens_for(Session, "after_rollback")
def _rolled_back(session: Session) -> None:
    session.info.pop(_WROTE, None)
