"""Recording changes in the audit log. Callers own the transaction, so an audit entry
commits together with the change it describes, or not at all."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.models import AuditEntry, Decision, Task
from controlplane.models.base import utcnow


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


def decision_view(decision: Decision, task: str | None) -> dict[str, Any]:
    return {
        "id": decision.id,
        "task": task,
        "action": decision.action,
        "actor": decision.actor,
        "reason": decision.reason,
        "rule": decision.rule,
        "bucket": decision.bucket,
        "stage_before": decision.stage_before,
        "stage_after": decision.stage_after,
        "flag_version_before": decision.flag_version_before,
        "flag_version_after": decision.flag_version_after,
        "created_at": decision.created_at,
        "evidence": decision.evidence,
    }


def record_decision(
    session: Session,
    task: Task,
    *,
    action: str,
    actor: str,
    reason: str,
    evidence: dict[str, Any],
    flag_version: int | None,
    at: datetime | None = None,
) -> Decision:
    """A decision that changes no stage (an input shift's re-grade mark and its clearing),
    with its audit entry, in the caller's transaction."""
    decision = Decision(
        task_id=task.id,
        action=action,
        actor=actor,
        reason=reason,
        stage_before=task.stage,
        stage_after=task.stage,
        flag_version_before=flag_version,
        flag_version_after=flag_version,
        created_at=at or utcnow(),
        evidence={"config_version": task.config_version, **evidence},
    )
    session.add(decision)
    session.flush()
    record(
        session,
        actor=actor,
        action=f"task.{action}",
        task=task.name,
        details={"decision": decision.id, "reason": reason},
    )
    return decision
