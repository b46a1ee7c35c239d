"""Stage changes and the actions that make them (docs/evidence.md, "Rollouts"): the policy
firing and promoting, people applying configs, promoting, rolling back, re-arming,
unblocking, killing and lifting.

Each action is one function that does all of its job, whichever door calls it (the API,
the CLI, the scheduler, a Celery job, later the dashboard): validation, one transaction
(`db.in_transaction`, retried on a transient conflict), the stage and its flag, the
decision with its evidence, the audit entry, and the outbox event that announces it —
all committed together or not at all. Doors map `ActionError` to their answers, and pass
in what the action needs from settings (the error-cost veto); nothing here reads them.

Lock order, everywhere: the flag state row, then the task, then its flag. A policy
evaluation judges without locks first and takes them, in that order, only when it is
about to change something (then judges again on what it holds), so evaluations of
different tasks never queue behind one another. A policy decision also carries a unique
key (task, rule, cell, last window of the run) as a second guard.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from controlplane.audit.service import record
from controlplane.catalog import repository as catalog_repository
from controlplane.catalog import service as catalog
from controlplane.catalog.schemas import ConfigError, TaskConfig, parse_config
from controlplane.catalog.service import (
    Applied,
    TaskConflict,
    TaskRuntime,
    runtimes,
)
from controlplane.db import in_transaction
from controlplane.errors import ActionError
from controlplane.evalsets.gate import check_unblock
from controlplane.models import Decision, Task
from controlplane.models.base import utcnow
from controlplane.notify.documents import change_document, decision_document, notice_document
from controlplane.notify.outbox import add_event
from controlplane.review.sampler import queue_regression
from controlplane.rollout import flags, repository
from controlplane.rollout import gate as gates
from controlplane.rollout.explain import (
    breach_ranges,
    explain,
    notice_sentence,
    promoted_to,
    rule_name,
    run_evidence,
    time_range,
    verdict_view,
    window_start,
)
from controlplane.rollout.policy import CellOutcome, Windows, evaluate
from controlplane.rollout.service import decision_view, gate

ACTIVE_STAGES = ("canary", "full")  # where rules act; in shadow they only feed the gate
T = TypeVar("T")

# The name the step-5 code raised; one error for every action now.
StageError = ActionError

# The longest reason a person's action takes (the API's request bodies declare the same).
REASON_MAX_CHARS = 2000
# C0 control characters (and DEL) other than tab and line feed.
_CONTROL = {chr(c) for c in (*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F)}


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


@dataclass
class Outcome:
    """What an evaluation did: its decisions and notices (already in the outbox)."""

    decisions: list[dict[str, Any]] = field(default_factory=list)
    notices: list[dict[str, Any]] = field(default_factory=list)


# --- announcing ------------------------------------------------------------------------


def announce(session: Session, decision: Decision, task: str | None) -> dict[str, Any]:
    """The decision's view, written to the outbox in this transaction; returns the view."""
    view = decision_view(decision, task)
    add_event(session, kind="decision", task=task, document=decision_document(view))
    return view


# --- stage changes, in the caller's transaction ---------------------------------------


def change_stage(
    session: Session,
    task: Task,
    config: TaskConfig,
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
    """Move the task to `stage` with its flag, decision, audit entry and outbox event, in
    this transaction. The caller holds the flag state and the task (in that order).

    `at` is the clock of the pass that decided (a person's action: now); windows that
    start from then on are the new stage's evidence."""
    before = repository.flag_version(session, task.id)
    stage_before = task.stage
    task.stage, task.canary_step = stage, canary_step
    now = at or utcnow()
    task.stage_changed_at = now
    task.updated_at = now
    # The input-length baseline is the one of the new stage (docs/evidence.md).
    task.input_p95_baseline = None
    session.flush()
    flags.publish(session, task, config, reason)
    decision = Decision(
        task_id=task.id,
        action=action,
        actor=actor,
        reason=reason,
        rule=rule,
        bucket=bucket,
        stage_before=stage_before,
        stage_after=stage,
        flag_version_before=before,
        flag_version_after=repository.flag_version(session, task.id),
        created_at=now,
        evidence={"config_version": task.config_version, **(evidence or {})},
        dedupe_key=dedupe_key,
    )
    session.add(decision)
    session.flush()
    record(
        session,
        actor=actor,
        action=f"task.{action}",
        task=task.name,
        details={
            "decision": decision.id,
            "from": stage_before,
            "to": stage,
            "reason": reason,
            **({"forced": True} if (evidence or {}).get("forced") else {}),
        },
    )
    return decision


def _promote_next(
    session: Session,
    task: Task,
    config: TaskConfig,
    *,
    actor: str,
    why: str,
    evidence: dict[str, Any],
    at: datetime | None = None,
) -> Decision:
    """One stage on (the person's promotion and the policy's share it)."""
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


# --- the policy ------------------------------------------------------------------------


@dataclass
class _Judgement:
    notices: list[dict[str, Any]]
    fire: CellOutcome | None = None
    promote: dict[str, Any] | None = None  # the gate's verdict and the models seen


def _judge(session: Session, task: Task, config: TaskConfig, veto: float) -> _Judgement:
    """What the rules say about the task now (reads only)."""
    windows = repository.stage_windows(session, task, config)
    outcomes = evaluate(config, windows, repository.stage_label_windows(session, task, config))
    fired = [o for o in outcomes if o.firing is not None and o.rule.mode != "off"]
    if not fired or task.stage == "shadow":
        judgement = _Judgement([])
        if config.promotion.auto_promote and task.stage in ("shadow", "canary") and not fired:
            judgement.promote = _auto_promotion(session, task, config, windows, outcomes, veto)
        return judgement
    fired.sort(key=lambda o: (o.firing.at_window if o.firing else 0, o.rule_index))
    notices = []
    for outcome in fired:
        if outcome.rule.mode == "notify":
            notice = {
                "task": task.name,
                "action": "notify",
                "rule": rule_name(outcome.rule),
                "bucket": outcome.cell,
                # The end of the window at which the rule fired: with the rule and bucket,
                # what makes the notice the same one at the next pass.
                "window_end": time_range(outcome, config)[1].isoformat(),
                "explanation": notice_sentence(task.name, outcome, config),
            }
            if not repository.noticed(session, task, notice):
                notices.append(notice)
            continue
        if repository.decided(session, _dedupe_key(task, outcome)):
            return _Judgement(notices)
        return _Judgement(notices, fire=outcome)
    return _Judgement(notices)


def _auto_promotion(
    session: Session,
    task: Task,
    config: TaskConfig,
    windows: Windows,
    outcomes: list[CellOutcome],
    veto: float,
) -> dict[str, Any] | None:
    """`promotion.auto_promote`: the policy promotes when the gate passes, unless the error
    cost is at the veto, or the edge model now serving was blocked by a rollback (until a
    person lifts the block)."""
    if config.error_cost >= veto:
        return None
    verdict = gates.verdict(task.name, task.stage, config, windows, outcomes)
    if not verdict["passed"]:
        return None
    recent = windows[-config.promotion.min_windows :]
    start = window_start(recent[0][0], config)
    end = window_start(recent[-1][0], config) + timedelta(seconds=config.window_seconds)
    seen = set(repository.models_seen(session, repository.in_time(task, start, end)))
    if seen & set(repository.blocked_models(session, task.id)):
        return None
    return {"forced": False, "gate": verdict, "models": sorted(seen)}


def _dedupe_key(task: Task, outcome: CellOutcome) -> str:
    firing = outcome.firing
    assert firing is not None
    return (
        f"{task.id}:{outcome.rule_index}:{outcome.cell}:{firing.at_window}:{task.stage_changed_at}"
    )


def evaluate_task(
    session: Session,
    task: Task,
    runtime: TaskRuntime,
    now: datetime | None = None,
    *,
    veto: float,
) -> Outcome:
    """Run the task's rules over the windows closed in its stage; fire the first that fires
    (or promote, with `auto_promote`), and announce what it did through the outbox."""
    config = runtime.config
    out = Outcome()
    if task.stage not in (*ACTIVE_STAGES, "shadow"):
        return out
    judgement = _judge(session, task, config, veto)
    if judgement.fire is not None or judgement.promote is not None:
        # About to change the task: take the locks in order, then judge on what they hold.
        flags.lock_state(session)
        session.refresh(task, with_for_update=True)
        config = config_now(session, task) or config
        if task.stage not in (*ACTIVE_STAGES, "shadow"):
            return out
        judgement = _judge(session, task, config, veto)
    for notice in judgement.notices:
        add_event(session, kind="notice", task=task.name, document=notice_document(notice))
        out.notices.append(notice)
    decision = None
    if judgement.fire is not None:
        decision = _fire(session, task, config, judgement.fire, now)
    elif judgement.promote is not None:
        decision = _promote_next(
            session,
            task,
            config,
            actor="policy",
            why="gate passed",
            evidence=judgement.promote,
            at=now,
        )
    if decision is not None:
        out.decisions.append(announce(session, decision, task.name))
    return out


def _fire(
    session: Session, task: Task, config: TaskConfig, outcome: CellOutcome, now: datetime | None
) -> Decision:
    firing = outcome.firing
    assert firing is not None
    start, end = time_range(outcome, config)
    where = repository.in_cell(task, config, outcome.cell, start, end)
    models = repository.models_seen(session, where)
    evidence: dict[str, Any] = {
        "how": firing.how,
        "detector": outcome.rule.detector,
        "confidence": outcome.rule.confidence,
        "windows": [verdict_view(v, config, outcome.rule.metric) for v in firing.verdicts],
        "statistic": firing.statistic,
        **run_evidence(outcome, config),
        "models": models,
        "examples": repository.examples(session, where),
        "explanation": explain(task.name, outcome, config),
    }
    decision = change_stage(
        session,
        task,
        config,
        stage="rolled_back",
        action="rollback",
        actor="policy",
        reason=evidence["explanation"],
        rule=rule_name(outcome.rule),
        bucket=outcome.cell,
        evidence=evidence,
        dedupe_key=_dedupe_key(task, outcome),
        at=now,
    )
    for model in models:
        repository.block(session, task, model, decision.id)
    # The breaching windows' results become the `regression` layer's review items, in this
    # transaction: a rollback and its evidence for the next model are one fact.
    queue_regression(
        session,
        task,
        config,
        decision_id=decision.id,
        rule=rule_name(outcome.rule),
        cell=outcome.cell,
        ranges=breach_ranges(outcome, config),
    )
    return decision


def evaluate_rollout(
    session: Session, task_id: int, now: datetime | None = None, *, veto: float
) -> Outcome:
    """`evaluate_task` for a task id (what a job or a pass holds), at the pass's clock."""
    found = runtimes(session).get(task_id)
    if found is None:
        return Outcome()
    return evaluate_task(session, *found, now, veto=veto)


# --- people's actions: each its own transaction ---------------------------------------


def _run(engine: Engine, work: Callable[[Session], T]) -> T:
    return in_transaction(engine, work)


def config_now(session: Session, task: Task) -> TaskConfig | None:
    """The task's current config, read and parsed now (not through the per-process cache,
    which may lag a config applied a moment ago): what a flag must be derived from. None
    when the stored config does not parse."""
    stored = catalog_repository.config_version(session, task.id, task.config_version)
    if stored is None:
        return None
    try:
        return parse_config(stored.config)
    except Exception:  # a ConfigError, or whatever an odd stored document raises
        return None


def _locked_task(session: Session, name: str) -> tuple[Task, TaskConfig]:
    """The flag state, then the named task, locked; its current config. 404 when unknown."""
    flags.lock_state(session)
    task = catalog_repository.task_by_name(session, name, for_update=True)
    if task is None:
        raise ActionError(404, f"task: no task {name!r}")
    config = config_now(session, task)
    if config is None:
        raise ActionError(
            409,
            f"config: the stored config version {task.config_version} of {name} does not "
            "parse; apply a valid config first",
        )
    return task, config


def _expect(task: Task, config: TaskConfig, expected: str | None) -> None:
    """409 unless the task is where the caller saw it: `shadow`, `canary` (any step) or
    `canary:<edge percent>` (that step)."""
    if expected is None:
        return
    steps = config.promotion.canary_steps
    now = task.stage
    here = [now]
    if now == "canary" and steps:
        here.append(f"canary:{steps[min(task.canary_step, len(steps) - 1)]}")
    if expected not in here:
        raise ActionError(
            409,
            f"expected_stage: {task.name} is in {here[-1]}, not {expected}; it has moved "
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
    `force` overrides it (audited), nothing overrides the error-cost veto. With
    `expected_stage`, 409 when the task is no longer there (someone moved it first)."""
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
        verdict = None
        if found.stage != "cloud":
            verdict = gate(session, found, config)
            if not verdict["passed"] and not force:
                raise ActionError(409, {"gate": verdict})
        decision = _promote_next(
            session,
            found,
            config,
            actor=actor,
            why=reason,
            evidence={
                "forced": bool(force and verdict is not None and not verdict["passed"]),
                "gate": verdict,
            },
        )
        return announce(session, decision, found.name)

    return _run(engine, work)


def rollback(engine: Engine, task: str, *, actor: str, reason: str) -> dict[str, Any]:
    """Send the task back to the cloud now (stage rolled_back)."""
    check_reason(reason)

    def work(session: Session) -> dict[str, Any]:
        found, config = _locked_task(session, task)
        if found.stage in ("cloud", "rolled_back"):
            raise ActionError(409, f"stage: {task} is in {found.stage}; nothing to roll back")
        decision = change_stage(
            session,
            found,
            config,
            stage="rolled_back",
            action="rollback",
            actor=actor,
            reason=f"rolled back by hand: {reason}",
        )
        return announce(session, decision, found.name)

    return _run(engine, work)


def rearm(engine: Engine, task: str, *, actor: str, reason: str) -> dict[str, Any]:
    """Re-arm a rolled-back task to shadow; its evidence starts over."""
    check_reason(reason)

    def work(session: Session) -> dict[str, Any]:
        found, config = _locked_task(session, task)
        if found.stage != "rolled_back":
            raise ActionError(
                409, f"stage: {task} is in {found.stage}; only a rolled-back task is re-armed"
            )
        decision = change_stage(
            session,
            found,
            config,
            stage="shadow",
            action="rearm",
            actor=actor,
            reason=f"re-armed to shadow: {reason}",
        )
        return announce(session, decision, found.name)

    return _run(engine, work)


def unblock(
    engine: Engine, task: str, *, model: str, actor: str, reason: str, force: bool = False
) -> dict[str, Any]:
    """Lift the auto-promotion block a rollback put on an edge model version (audited; it
    changes no stage and no flag, so it is no decision; it is announced as a change).

    The model must have a stored run on the task's current `regression` eval set at or above
    `promotion.regression_min_accuracy` (the eval set a rollback produced is what lets the
    next model back in); `force` lifts it without one, and the audit entry says so."""
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
        refused = check_unblock(session, found, config, model)
        if refused is not None and not force:
            raise ActionError(409, f"model: {refused} (or unblock with force, audited)")
        row.lifted_at, row.lifted_by, row.lift_reason = utcnow(), actor, reason
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

    return _run(engine, work)


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
    left_killed = []
    for task in tasks:
        config = config_now(session, task)
        if config is not None:
            flags.publish(session, task, config, f"{action}: {reason}")
        elif killed:
            flags.publish_killed(session, task, f"{action}: {reason}")
        else:
            left_killed.append(task.name)
    evidence: dict[str, Any] = {"tasks": len(tasks)}
    if left_killed:
        evidence["left_killed"] = left_killed
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
    return _run(
        engine,
        lambda s: announce(s, set_killed(s, killed=True, actor=actor, reason=reason), None),
    )


def lift(engine: Engine, *, actor: str, reason: str) -> dict[str, Any]:
    """Lift the kill switch: every flag goes back to its stage."""
    check_reason(reason)
    return _run(
        engine,
        lambda s: announce(s, set_killed(s, killed=False, actor=actor, reason=reason), None),
    )


# --- task configs (they publish a flag, so they are applied here) ---------------------


def apply_config(session: Session, raw: Any, *, actor: str) -> Applied:
    """Register a task or give it a new config version, and publish its flag, in this
    transaction (flag state locked first). Raises ConfigError on a bad config."""
    flags.lock_state(session)
    applied = catalog.apply_config(session, raw, actor=actor)
    if applied.changed:
        task = session.get(Task, applied.task_id)
        assert task is not None
        reason = (
            f"task created in {task.stage}"
            if applied.created
            else f"config version {applied.version}"
        )
        flags.publish(session, task, applied.parsed or parse_config(applied.config), reason)
    return applied


def _announce_applied(session: Session, applied: Applied, actor: str) -> None:
    if not applied.changed:
        return
    what = f"created in {applied.stage}" if applied.created else f"config version {applied.version}"
    add_event(
        session,
        kind="change",
        task=applied.task,
        document=change_document(
            action="task.create" if applied.created else "task.config",
            task=applied.task,
            actor=actor,
            explanation=f"{applied.task}: {what} by {actor}",
            details={"version": applied.version, "stage": applied.stage},
        ),
    )


def apply_tasks(engine: Engine, documents: list[Any], *, actor: str) -> list[Applied]:
    """Apply configs in one transaction (all or none). ActionError 422 names what a bad
    config got wrong; 409 when another writer created the same task at that moment."""

    def work(session: Session) -> list[Applied]:
        applied = [apply_config(session, doc, actor=actor) for doc in documents]
        for one in applied:
            _announce_applied(session, one, actor)
        return applied

    try:
        return _run(engine, work)
    except ConfigError as exc:
        raise ActionError(422, exc.errors) from None
    except TaskConflict as exc:
        raise ActionError(409, str(exc)) from None
