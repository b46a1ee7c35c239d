"""People's stage actions, whichever door calls them (API, CLI, dashboard): promote, roll
back, re-arm, unblock an edge model, kill and lift. Each is one transaction (retried on a
transient conflict) holding the stage, its flag, the decision, the audit entry and the
outbox event; doors map `ActionError` to their answers and pass in what an action needs
from settings (the error-cost veto). Lock order: docs/decisions.md, "Rollouts"."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from controlplane.audit.service import record
from controlplane.catalog.schemas import TaskConfig
from controlplane.catalog.service import load_runtimes, task_or_404
from controlplane.db import in_transaction
from controlplane.errors import ActionError
from controlplane.evalsets.gate import check_unblock
from controlplane.evalsets.service import fill_regression
from controlplane.grading.service import grade_held
from controlplane.models import Decision, FailingEvaluation, Task
from controlplane.models.base import utcnow
from controlplane.notify.documents import change_document
from controlplane.notify.outbox import add_event
from controlplane.review import repository as review_repository
from controlplane.rollout import flags, repository
from controlplane.rollout import gate as gates
from controlplane.rollout.schemas import REASON_MAX_CHARS
from controlplane.rollout.service import gate
from controlplane.rollout.stages import (
    announce,
    change_stage,
    config_now,
    promote_next,
    unparsed_why,
)
from controlplane.rollout.taskview import shown_stage

# C0 control characters (and DEL) other than tab and line feed.
_CONTROL = {chr(c) for c in (*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F)}

log = logging.getLogger("shadowplane.rollout")


def check_reason(reason: str) -> str:
    """`reason` when a person's action may record it; ActionError 422 naming the field
    when it is empty (after stripping), longer than REASON_MAX_CHARS, or holds a control
    character other than tab and line feed. Every door refuses alike, before any lock."""
    if not isinstance(reason, str) or not reason.strip():
        raise ActionError(422, "reason: say why (it is recorded with the action)")
    if len(reason) > REASON_MAX_CHARS:
        raise ActionError(
            422, f"reason: {len(reason)} characters; at most {REASON_MAX_CHARS} are kept"
        )
    bad = sorted(_CONTROL.intersection(reason))
    if bad:
        raise ActionError(
            422,
            "reason: holds control characters ("
            + ", ".join(f"U+{ord(c):04X}" for c in bad[:5])
            + "); only tab and line breaks are kept",
        )
    return reason


def _locked_task(session: Session, name: str) -> tuple[Task, TaskConfig]:
    """The flag state, then the named task, locked; its current config. 404 when unknown;
    409 when its stored config does not parse."""
    task, config = _locked_task_as_stored(session, name)
    if config is None:
        raise ActionError(
            409,
            f"config: the stored config version {task.config_version} of {name} does not "
            "parse; apply a valid config first",
        )
    return task, config


def _locked_task_as_stored(session: Session, name: str) -> tuple[Task, TaskConfig | None]:
    """The flag state, then the named task, locked; its current config, None when it does
    not parse. 404 when unknown."""
    flags.lock_state(session)
    task = task_or_404(session, name, for_update=True)
    return task, config_now(session, task)


def _expect(task: Task, config: TaskConfig, expected: str | None) -> None:
    """409 unless the task is where the caller saw it: `shadow`, `canary` (any step) or
    `canary:<edge percent>` (that step)."""
    if expected is None:
        return
    here = shown_stage(task, config.promotion.canary_steps)
    if expected not in (task.stage, here):
        raise ActionError(
            409,
            f"expected_stage: {task.name} is in {here}, not {expected}; it has moved "
            "since you looked",
        )


def promote(
    engine: Engine,
    task: str,
    *,
    actor: str,
    reason: str,
    veto: float,
    force: bool = False,
    expected_stage: str | None = None,
) -> dict[str, Any]:
    """Move the task one stage on. The gate guards every move that serves the edge more;
    leaving `shadow` also needs the task's grade, graded now, to be `offload`. `force`
    overrides the gate and a `shadow`, `insufficient` or by-score `keep_cloud` grade
    (audited: what it went past and why); nothing overrides the error-cost veto or a
    `forbid`. With `expected_stage`, 409 when the task is no longer there (someone moved it
    first)."""
    check_reason(reason)

    def work(session: Session) -> dict[str, Any]:
        found, config = _locked_task(session, task)
        _expect(found, config, expected_stage)
        gates.next_stage(found.stage, found.canary_step, config)  # 409 when there is none
        if found.stage != "cloud" and config.error_cost >= veto:
            raise ActionError(
                409,
                {
                    "veto": f"error_cost {config.error_cost:g} is at or over the error-cost "
                    f"veto {veto:g} (SHADOWPLANE_ERROR_COST_VETO): this task never leaves "
                    "shadow",
                },
            )
        if found.stage not in ("cloud", "shadow") and config.forbid is not None:
            # Leaving shadow, the grade refuses a forbid (tier `forbid`, never forceable);
            # past it, a forbid declared since stops every next step, forced or not.
            raise ActionError(
                409,
                {
                    "forbid": f"the task declares forbid: {config.forbid}; it is never "
                    "offloaded, forced or not",
                },
            )
        verdict, graded, blocked = None, None, {}
        if found.stage == "shadow":
            # Leaving shadow needs the tier `offload`, graded now on the config promoted.
            graded = grade_held(session, found, config, veto=veto, now=utcnow(), keep=True)
            # An offload grade over traffic since an input shift has cleared its mark by now.
            if found.needs_regrade:
                raise ActionError(409, {"needs_regrade": regrade_refusal(found)})
            refused = gates.grade_block(graded, config)
            if refused is not None and not refused["forceable"]:
                raise ActionError(409, {"grade": refused})
            if refused is not None:
                blocked["grade"] = refused
        if found.stage != "cloud":
            verdict = gate(session, found, config)
            if not verdict["passed"]:
                blocked["gate"] = verdict
        if blocked and not force:
            raise ActionError(409, {k: blocked[k] for k in ("gate", "grade") if k in blocked})
        evidence: dict[str, Any] = {"forced": bool(blocked), "gate": verdict}
        if graded is not None:
            evidence["grade"] = gates.grade_evidence(graded)
        if blocked:
            evidence["forced_past"] = _forced_past(blocked)
        decision = promote_next(session, found, config, actor=actor, why=reason, evidence=evidence)
        return announce(session, decision, found.name)

    return in_transaction(engine, work)


def regrade_refusal(task: Task) -> str:
    """Why a task an input shift rolled back may not be promoted yet, and what clears it."""
    since = task.shifted_at.isoformat() if task.shifted_at is not None else "the shift"
    return (
        f"{task.name} needs a re-grade: its inputs shifted (rolled back at {since}); "
        f"promotion is refused, forced or not, until a grade over traffic since then says "
        f"offload (`shadowplane grade --task {task.name}` once that traffic is in)"
    )


# What a refused promotion's detail may hold (promote's ActionError 409).
PROMOTION_REFUSALS = ("needs_regrade", "veto", "forbid", "grade", "gate")


def refusal_text(detail: Any, force: str = "A forced promotion") -> str:
    """An action's refusal as people read it (the CLI, the dashboard): a sentence as it is;
    a refused promotion one line per thing in the way, with its reasons, and whether
    `force` (how the reader forces one) goes past them; anything else as compact JSON."""
    if isinstance(detail, str):
        return detail
    if isinstance(detail, dict) and detail and set(detail) <= set(PROMOTION_REFUSALS):
        lines = ["promotion refused:"]
        for key in PROMOTION_REFUSALS:
            if key not in detail:
                continue
            part = detail[key]
            if key == "gate" and isinstance(part, dict):
                reasons = "; ".join(map(str, part.get("reasons") or ())) or "not passed"
                stage = f" ({part['stage']})" if part.get("stage") else ""
                lines.append(f"- the gate{stage}: {reasons}")
            elif key == "grade" and isinstance(part, dict):
                lines.append(f"- the grade is {part.get('tier')}: {part.get('reason')}")
            else:
                lines.append(f"- {key}: {part}")
        grade = detail.get("grade")
        forceable = set(detail) <= {"gate", "grade"} and (
            not isinstance(grade, dict) or grade.get("forceable") is True
        )
        if forceable:
            lines.append(f"{force} goes past these (audited, with its reason).")
        else:
            lines.append("Forcing does not go past this.")
        return "\n".join(lines)
    from controlplane.compare.jsonutil import dumps

    return dumps(detail).decode()


def _forced_past(blocked: dict[str, Any]) -> dict[str, Any]:
    """What a forced promotion went past, for its decision and audit entry: the gate's
    reasons, the grade's tier and the sentence that kept it from `offload`."""
    past: dict[str, Any] = {}
    if "gate" in blocked:
        past["gate"] = blocked["gate"]["reasons"]
    if "grade" in blocked:
        past["grade"] = {"tier": blocked["grade"]["tier"], "reason": blocked["grade"]["reason"]}
    return past


def _move(
    engine: Engine,
    task: str,
    *,
    actor: str,
    reason: str,
    action: str,
    to: str,
    said: str,
    may_leave: Callable[[str], bool],
    otherwise: str,
    unparsed: bool = False,
) -> dict[str, Any]:
    """A person's stage change the gate does not guard (it serves the edge less): to stage
    `to` when `may_leave` allows the task's stage, else 409 saying `otherwise`. With
    `unparsed`, also for a task whose stored config does not parse (its flag stays on the
    cloud, under the new stage); else 409 for one."""
    check_reason(reason)

    def work(session: Session) -> dict[str, Any]:
        found, config = (_locked_task_as_stored if unparsed else _locked_task)(session, task)
        if not may_leave(found.stage):
            raise ActionError(409, f"stage: {task} is in {found.stage}; {otherwise}")
        decision = change_stage(
            session, found, config, stage=to, action=action, actor=actor, reason=f"{said}: {reason}"
        )
        return announce(session, decision, found.name)

    return in_transaction(engine, work)


def rollback(engine: Engine, task: str, *, actor: str, reason: str) -> dict[str, Any]:
    """Send the task back to the cloud now (stage rolled_back)."""
    return _move(
        engine,
        task,
        actor=actor,
        reason=reason,
        action="rollback",
        to="rolled_back",
        said="rolled back by hand",
        may_leave=lambda stage: stage not in ("cloud", "rolled_back"),
        otherwise="nothing to roll back",
        # A canary whose config an upgrade cannot read is on the cloud already (grounded),
        # but applying a fix would put it back on the edge: it is rolled back first.
        unparsed=True,
    )


def rearm(engine: Engine, task: str, *, actor: str, reason: str) -> dict[str, Any]:
    """Re-arm a rolled-back task to shadow; its evidence starts over."""
    return _move(
        engine,
        task,
        actor=actor,
        reason=reason,
        action="rearm",
        to="shadow",
        said="re-armed to shadow",
        may_leave=lambda stage: stage == "rolled_back",
        otherwise="only a rolled-back task is re-armed",
    )


def unblock(
    engine: Engine, task: str, *, model: str, actor: str, reason: str, force: bool = False
) -> dict[str, Any]:
    """Lift the auto-promotion block a rollback put on an edge model version (audited; it
    changes no stage and no flag, so it is no decision; it is announced as a change).

    Every regression item the blocking rollback (and later ones) queued must be in the
    task's `regression` eval set, and a stored run on the current set — of the model or of
    a later version of its line (`small-int4@4` for `small-int4@3`) — must reach
    `promotion.regression_min_accuracy` (the eval set a rollback produced is what lets the
    next model back in); the refusal names the model to run. `force` lifts it without
    that, and the audit entry says so."""
    check_reason(reason)

    def work(session: Session) -> dict[str, Any]:
        found, config = _locked_task(session, task)
        row = repository.active_block(session, found.id, model)
        if row is None:
            raise ActionError(
                404,
                f"model: {model!r} is not blocked for {task}; blocked: "
                f"{', '.join(repository.blocked_models(session, found.id)) or 'none'}",
            )
        # Labelled regression items the last pass has not put in the set yet go in first:
        # the gate judges the set as the labels make it.
        fill_regression(session, found)
        refused = check_unblock(session, found, config, model)
        if refused is not None and not force:
            raise ActionError(409, f"model: {refused} (or unblock with force, audited)")
        row.lifted_at, row.lifted_by, row.lift_reason = utcnow(), actor, reason
        session.flush()
        # The regression items no block of the task waits on now (the lifted one's, unless
        # an earlier block still does) no longer queue before another rollback's sample.
        review_repository.drop_unwaited_priority(session, found.id)
        details: dict[str, Any] = {"model": model, "reason": reason, "forced": force}
        if force:
            details["gate"] = refused or "passed"
        record(session, actor=actor, action="task.unblock", task=task, details=details)
        add_event(
            session,
            kind="change",
            task=task,
            document=change_document(
                action="task.unblock",
                task=task,
                actor=actor,
                explanation=(
                    f"{task}: {actor} unblocked edge model {model}"
                    f"{' (forced past the regression eval set)' if force else ''}: {reason}"
                ),
                details=details,
            ),
        )
        session.flush()
        return {
            "task": task,
            "model": model,
            "blocked": repository.blocked_models(session, found.id),
        }

    return in_transaction(engine, work)


def left_on_the_cloud(decision: dict[str, Any]) -> str | None:
    """What a lift left killed, as a sentence (None when it left nothing)."""
    evidence = decision.get("evidence", {})
    said = []
    if names := evidence.get("left_killed"):
        said.append(
            f"still on the cloud: {', '.join(names)} (the stored config does not parse, so "
            "nothing says what the stage routes); apply a valid config (shadowplane tasks "
            "apply) and the flag follows the stage again"
        )
    if names := evidence.get("left_failing"):
        said.append(
            f"still on the cloud: {', '.join(names)} (every rollout evaluation has failed "
            "for 15 minutes: the workers' logs say why); the flag follows the stage again "
            "at the first evaluation that works"
        )
    return "; ".join(said) or None


def ground_unparsed(session: Session) -> list[str]:
    """Send to the cloud each task whose current stored config does not parse (its flag
    killed, its stage kept), in this transaction; the names of those whose flag changed.
    Such a task is skipped everywhere, no rule judges its edge, so its flag must not keep
    routing to it; applying a valid config publishes the flag of its stage again. Each pass
    calls it (scheduler.run_pass, the Celery plan job): a flag already killed is left."""
    _, broken = load_runtimes(session)
    if not broken:
        return []
    flags.lock_state(session)  # as an apply does: a fix applied meanwhile is seen below
    grounded = []
    for task, why in sorted(broken.values(), key=lambda item: item[0].name):
        # Judged again under the lock, from the database (the runtimes may be a second
        # old): a valid version applied since must not be grounded after its publish.
        current = session.get(Task, task.id, with_for_update=True, populate_existing=True)
        if current is None or config_now(session, current) is not None:
            continue
        reason = f"to the cloud: {why}"[:REASON_MAX_CHARS]
        if flags.publish_killed(session, current, reason) is not None:
            log.error("task %s: %s; its flag now routes to the cloud", task.name, why)
            grounded.append(task.name)
        # Announced once, even when its flag was on the cloud already (the kill switch).
        flags.hold_for_config(session, current, why, said="its flag routes to the cloud")
    return grounded


# How long a task's rollout evaluations may all fail before its flag goes to the cloud:
# long enough for a database that restarts, a worker that is replaced, or a transient error
# retried, to pass without touching routing; short beside what a rule needs to act.
EVALUATION_GRACE = timedelta(minutes=15)
# The stages whose flag routes to the edge: what a failing evaluation leaves unjudged.
ON_THE_EDGE = ("canary", "full")


def evaluation_failed(session: Session, task_id: int, now: datetime, why: str) -> bool:
    """Note, in this transaction, that the task's rollout evaluation failed at `now`; once
    they have all failed for EVALUATION_GRACE, a task on the edge (canary, full) goes to
    the cloud: its flag killed, its stage kept. True when its flag changed now."""
    flags.lock_state(session)
    task = session.get(Task, task_id, with_for_update=True)
    if task is None:
        return False
    failing = session.get(FailingEvaluation, task_id, with_for_update=True)
    if failing is None:
        session.add(FailingEvaluation(task_id=task_id, since=now, last_at=now))
        return False
    if failing.grounded_at is None and now - failing.last_at > _run_gap(session, task):
        # Failures far apart (a restart, then days with no window closed): not one run of
        # failures, so the count starts again.
        failing.since = now
    failing.last_at = max(failing.last_at, now)
    if (
        failing.grounded_at is not None
        or task.stage not in ON_THE_EDGE
        or now - failing.since < EVALUATION_GRACE
    ):
        return False
    failing.grounded_at = now
    session.flush()
    reason = (
        f"to the cloud: every rollout evaluation since {failing.since.isoformat()} failed: {why}"
    )
    changed = flags.publish_killed(session, task, reason[:REASON_MAX_CHARS]) is not None
    log.error("task %s: %s", task.name, reason)
    # Announced whether or not the flag moved now: under the kill switch it is on the cloud
    # already, and the failing evaluations hold it there once the switch is lifted.
    why = why[:REASON_MAX_CHARS]
    since = failing.since.isoformat()
    flags.announce_hold(
        session,
        task,
        action="flag.grounded",
        explanation=f"{task.name}: its flag now routes to the cloud: every rollout "
        f"evaluation since {since} failed ({why}); it follows its stage again at the first "
        "evaluation that works",
        details={"cause": "evaluation_failing", "stage": task.stage, "since": since, "why": why},
    )
    return changed


def _run_gap(session: Session, task: Task) -> timedelta:
    """The longest gap between two failures of one run: evaluations come at each closed
    window, so three of the task's windows (at least EVALUATION_GRACE)."""
    config = config_now(session, task)
    seconds = config.window_seconds if config is not None else 0
    return max(EVALUATION_GRACE, timedelta(seconds=3 * seconds))


def evaluation_works(session: Session, task_id: int) -> bool:
    """Note, in this transaction, that the task's rollout evaluation succeeded: if it had
    been failing, the flag of its stage is published again (a failing evaluation may have
    sent it to the cloud). True when its flag changed now."""
    if session.get(FailingEvaluation, task_id) is None:  # as nearly always: no lock taken
        return False
    flags.lock_state(session)
    task = session.get(Task, task_id, with_for_update=True)
    failing = session.get(FailingEvaluation, task_id, with_for_update=True)
    if task is None or failing is None:
        return False
    grounded_at = failing.grounded_at
    session.delete(failing)
    session.flush()  # before the publish below reads whether the task is grounded
    config = config_now(session, task)
    if config is None:
        return False
    changed = flags.publish(session, task, config, "rollout evaluation works again")
    if changed is not None:
        log.warning(
            "task %s: rollout evaluation works again; its flag follows its stage", task.name
        )
    if grounded_at is not None:
        held = flags.lock_state(session).killed
        flags.announce_hold(
            session,
            task,
            action="flag.ungrounded",
            explanation=f"{task.name}: a rollout evaluation works again; "
            + (
                "the kill switch still holds its flag on the cloud, and the lift returns it "
                "to its stage"
                if held
                else "its flag follows its stage "
                f"({shown_stage(task, config.promotion.canary_steps)}) again"
            ),
            details={
                "cause": "evaluation_works",
                "stage": task.stage,
                "grounded_at": grounded_at.isoformat(),
            },
        )
    return changed is not None


def set_killed(session: Session, *, killed: bool, actor: str, reason: str) -> Decision:
    """The global kill switch, in this transaction: every flag gets a new version (a task
    whose stored config does not parse too: its flag goes to the cloud); stages are kept.
    Lifting leaves such a task's flag killed until a valid config is applied (it has no
    config to say what its stage routes)."""
    state = flags.lock_state(session)
    if state.killed == killed:
        raise ActionError(
            409, "kill: already killed" if killed else "kill: not killed; nothing to lift"
        )
    state.killed, state.kill_reason = killed, reason if killed else None
    session.flush()
    action = "kill" if killed else "lift"
    tasks = repository.tasks_in_order(session, for_update=True)
    left_killed, left_failing = [], []
    said = f"{action}: {reason}"
    for task in tasks:
        # A flag this action leaves as it was (on the cloud already: its config does not
        # parse, or failing evaluations hold it) gets a new version all the same, saying
        # the kill, or why a lift left it on the cloud, never an earlier action's reason.
        config = config_now(session, task)
        if config is not None:
            failing = session.get(FailingEvaluation, task.id)
            since = failing.since if failing is not None and failing.grounded_at else None
            says = said
            if since is not None and not killed:
                left_failing.append(task.name)  # publish keeps it on the cloud
                says = flags.left_on_the_cloud(
                    said,
                    f"every rollout evaluation since {since.isoformat()} failed (the workers' "
                    "logs say why)",
                )
            if flags.publish(session, task, config, says) is None and since is not None:
                flags.publish_killed(session, task, says, restate=True)
        elif killed:
            flags.publish_killed(session, task, said, restate=True)
        else:
            why = unparsed_why(session, task)
            flags.publish_killed(session, task, flags.left_on_the_cloud(said, why), restate=True)
            left_killed.append(task.name)
            flags.hold_for_config(session, task, why, said="the lift left its flag on the cloud")
    evidence: dict[str, Any] = {"tasks": len(tasks)}
    if left_killed:
        evidence["left_killed"] = left_killed
    if left_failing:
        evidence["left_failing"] = left_failing
    decision = Decision(task_id=None, action=action, actor=actor, reason=reason, evidence=evidence)
    session.add(decision)
    session.flush()
    record(
        session,
        actor=actor,
        action=f"flags.{action}",
        task=None,
        details={"decision": decision.id, "reason": reason},
    )
    return decision


def kill(engine: Engine, *, actor: str, reason: str) -> dict[str, Any]:
    """Throw the kill switch: every flag says cloud until lifted."""
    check_reason(reason)
    return in_transaction(
        engine,
        lambda s: announce(s, set_killed(s, killed=True, actor=actor, reason=reason), None),
    )


def lift(engine: Engine, *, actor: str, reason: str) -> dict[str, Any]:
    """Lift the kill switch: every flag goes back to its stage."""
    check_reason(reason)
    return in_transaction(
        engine,
        lambda s: announce(s, set_killed(s, killed=False, actor=actor, reason=reason), None),
    )
