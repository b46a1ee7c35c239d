"""A stage change in the caller's transaction, shared by the policy pass and people's
actions: the stage, its flag, the decision, the audit entry; announcing a decision through
the outbox; and a task's config read now, which a flag is derived from
(docs/evidence.md, "Rollouts"; the lock order in docs/decisions.md)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from controlplane.audit.service import decision_view, record_decision
from controlplane.catalog import repository as catalog_repository
from controlplane.catalog.schemas import TaskConfig, parse_config
from controlplane.catalog.service import unparsable
from controlplane.metrics import shift
from controlplane.models import Decision, Task
from controlplane.models.base import utcnow
from controlplane.notify.documents import decision_document
from controlplane.notify.outbox import add_event
from controlplane.rollout import flags, repository
from controlplane.rollout import gate as gates
from controlplane.rollout.explain import promoted_to


def config_now(session: Session, task: Task) -> TaskConfig | None:
    """The task's current config, read and parsed now (not through the per-process cache,
    which may lag a config applied a moment ago): what a flag must be derived from. None
    when the stored config does not parse."""
    stored = stored_config(session, task)
    return stored if isinstance(stored, TaskConfig) else None


def unparsed_why(session: Session, task: Task) -> str:
    """Why the task's stored config does not parse, as the pass logs it."""
    stored = stored_config(session, task)
    if isinstance(stored, TaskConfig):
        return f"stored config version {task.config_version} parses"
    return stored


def stored_config(session: Session, task: Task) -> TaskConfig | str:
    """The task's current stored config parsed now, or why it cannot be."""
    stored = catalog_repository.config_version(session, task.id, task.config_version)
    if stored is None:
        return f"stored config version {task.config_version} is missing"
    try:
        return parse_config(stored.config, stored=True)
    except Exception as exc:  # a ConfigError, or whatever an odd stored document raises
        return unparsable(task.config_version, exc)


def announce(session: Session, decision: Decision, task: str | None) -> dict[str, Any]:
    """The decision's view, written to the outbox in this transaction; returns the view."""
    view = decision_view(decision, task)
    add_event(session, kind="decision", task=task, document=decision_document(view))
    return view


def change_stage(
    session: Session,
    task: Task,
    config: TaskConfig | None,
    *,
    stage: str,
    action: str,
    actor: str,
    reason: str,
    canary_step: int = 0,
    rule: str | None = None,
    bucket: str | None = None,
    evidence: dict[str, Any] | None = None,
    dedupe_key: str | None = None,
    at: datetime | None = None,
) -> Decision:
    """Move the task to `stage` with its flag, decision and audit entry, in this
    transaction. The caller holds the flag state and the task (in that order). A task whose
    stored config does not parse (`config` None) keeps its flag on the cloud, under the new
    stage.

    `at` is the clock of the pass that decided (a person's action: now); windows that
    start from then on are the new stage's evidence."""
    before = repository.flag_version(session, task.id)
    stage_before, stage_began = task.stage, task.stage_changed_at
    task.stage, task.canary_step = stage, canary_step
    now = at or utcnow()
    task.stage_changed_at = now
    task.updated_at = now
    if config is not None and stage_before == "shadow" and stage in ("canary", "full"):
        # Leaving shadow: the input lengths it was graded and promoted on become the
        # baseline the input-shift rule and alert compare with (docs/evidence.md).
        kept = promotion_baseline(session, task, config, evidence or {}, now, stage_began)
        task.input_baseline = kept.document() if kept is not None else None
        evidence = {**(evidence or {}), "input_baseline": task.input_baseline}
    session.flush()
    if config is None:
        why = unparsed_why(session, task)
        flags.publish_killed(session, task, flags.left_on_the_cloud(reason, why))
        flags.hold_for_config(session, task, why, said=f"{action}: its flag stays on the cloud")
    else:
        flags.publish(session, task, config, reason)
    return record_decision(
        session,
        task,
        action=action,
        actor=actor,
        reason=reason,
        evidence=evidence or {},
        flags=(before, repository.flag_version(session, task.id)),
        stages=(stage_before, stage),
        rule=rule,
        bucket=bucket,
        dedupe_key=dedupe_key,
        audited=_audited(evidence or {}),
        at=now,
    )


def promotion_baseline(
    session: Session,
    task: Task,
    config: TaskConfig,
    evidence: dict[str, Any],
    now: datetime,
    stage_began: datetime | None,
) -> shift.Baseline | None:
    """The baseline a task leaving shadow is promoted on: the input lengths over the span of
    the offload grade it holds, else (forced past its grade) those of its shadow windows
    over at most the grading span."""
    grade = evidence.get("grade") or {}
    if grade.get("tier") == "offload":
        found = shift.latest_offload_baseline(session, task.id)
        if found is not None:
            return found
    since = now - timedelta(seconds=config.grading.span_seconds)
    if stage_began is not None and stage_began > since:
        since = stage_began
    counts, over = shift.histogram_between(session, task.id, config.window_seconds, since, now)
    if not sum(counts):
        return None
    return shift.Baseline(
        tuple(counts),
        over,
        "the shadow windows it was promoted from",
        since.isoformat(),
        now.isoformat(),
        config.max_input_tokens,
    )


def mark_regrade(
    session: Session, task: Task, rollback: Decision, *, at: datetime | None
) -> dict[str, Any]:
    """An input-shift rollback marks the task `needs_regrade`: a decision of its own,
    audited and announced, in the rollback's transaction."""
    now = at or utcnow()
    task.needs_regrade, task.shifted_at = True, now
    flag = repository.flag_version(session, task.id)
    reason = (
        "inputs shifted: promotion is refused until a grade over traffic since "
        f"{now.isoformat()} says offload (re-grade, don't re-tune thresholds)"
    )
    decision = record_decision(
        session,
        task,
        action="needs_regrade",
        actor="policy",
        reason=reason,
        evidence={"rollback": rollback.id, "shifted_at": now.isoformat()},
        flags=(flag, flag),
        at=now,
    )
    return announce(session, decision, task.name)


def _audited(evidence: dict[str, Any]) -> dict[str, Any]:
    """What the audit entry repeats of a decision's evidence: whether it was forced and past
    what (the gate's reasons, the grade's tier and why), and the grade's tier it went on."""
    out: dict[str, Any] = {}
    if evidence.get("forced"):
        out["forced"] = True
        if evidence.get("forced_past"):
            out["forced_past"] = evidence["forced_past"]
    if evidence.get("grade"):
        out["tier"] = evidence["grade"]["tier"]
    return out


def promote_next(
    session: Session,
    task: Task,
    config: TaskConfig,
    *,
    actor: str,
    why: str,
    evidence: dict[str, Any],
    at: datetime | None = None,
) -> Decision:
    """One stage on: a person's promotion and the policy's auto-promotion alike."""
    stage, step = gates.next_stage(task.stage, task.canary_step, config)
    return change_stage(
        session,
        task,
        config,
        stage=stage,
        action="promote",
        actor=actor,
        reason=f"promoted to {promoted_to(stage, step, config)}: {why}",
        canary_step=step,
        evidence=evidence,
        at=at,
    )
