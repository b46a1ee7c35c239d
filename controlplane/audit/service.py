"""Recording changes in the audit log. Callers own the transaction, so an audit entry
commits together with the change it describes, or not at all."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.models import AuditEntry


def record(
    session: Session, *, actor: str, action: str, task: str | None, details: dict[str, Any]
) -> AuditEntry:
    entry = AuditEntry(actor=actor, action=action, task=task, details=details)
    session.add(entry)
    session.flush()
    return entry


def entries(
    session: Session,
    *,
    task: str | None = None,
    actor: str | None = None,
    since: datetime | None = None,
    limit: int = 100,
) -> list[AuditEntry]:
    """Audit entries, newest first, filtered by task, actor and time."""
    query = select(AuditEntry).order_by(AuditEntry.id.desc()).limit(limit)
    if task is not None:
        query = query.where(AuditEntry.task == task)
    if actor is not None:
        query = query.where(AuditEntry.actor == actor)
    if since is not None:
        query = query.where(AuditEntry.created_at >= since)
    return list(session.scalars(query))
