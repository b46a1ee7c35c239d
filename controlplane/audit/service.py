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
    flags: tuple[int | None, int | None],
    stages: tuple[str, str] | None = None,
    rule: str | None = None,
    bucket: str | None = None,
    dedupe_key: str | None = None,
    audited: dict[str, Any] | None = None,
    at: datetime | None = None,
) -> Decision:
    """A rollout decision and its audit entry, in the caller's transaction: `flags` the flag
    versions before and after, `stages` the stage before and after (None: it stays, as for
    an input shift's re-grade mark and its clearing), `audited` what the entry adds."""
    before, after = stages if stages is not None else (task.stage, task.stage)
    decision = Decision(
        task_id=task.id,
        action=action,
        actor=actor,
        reason=reason,
        rule=rule,
        bucket=bucket,
        stage_before=before,
        stage_after=after,
        flag_version_before=flags[0],
        flag_version_after=flags[1],
        created_at=at or utcnow(),
        evidence={"config_version": task.config_version, **evidence},
        dedupe_key=dedupe_key,
    )
    session.add(decision)
    session.flush()
    moved = {"from": before, "to": after} if stages is not None else {}
    record(
        session,
        actor=actor,
        action=f"task.{action}",
        task=task.name,
        details={"decision": decision.id, **moved, "reason": reason, **(audited or {})},
    )
    return decision
