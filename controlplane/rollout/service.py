"""Stage changes and their decisions (DESIGN §2, §4): the policy firing, people promoting,
rolling back, re-arming, unblocking, killing and lifting.

Every stage change happens in the caller's one transaction with everything it implies:
the task's stage, its flag (new version, new global revision), the decision with its
evidence, the audit entry, the reset of the input-length baseline, and — for a policy
rollback — the block on the edge model versions it saw. Evaluation locks the task row,
so two evaluators never decide twice; a policy decision also carries a unique key (task,
rule, cell, last window of the run) as a second guard.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from controlplane.audit.service import record
from controlplane.catalog.schemas import Rule, TaskConfig
from controlplane.catalog.service import TaskRuntime
from controlplane.metrics.fields import ALL, STORED
from controlplane.metrics.repository import bucket_of
from controlplane.metrics.stats import wilson
from controlplane.metrics.windows import from_index
from controlplane.models import (
    BlockedModel,
    Decision,
    Flag,
    FlagState,
    Result,
    Task,
    Window,
    WindowMetrics,
)
from controlplane.models.base import utcnow
from controlplane.rollout import flags
from controlplane.rollout.policy import CellOutcome, Windows, evaluate, judged_buckets
from controlplane.rollout.verdicts import Verdict

ACTIVE_STAGES = ("canary", "full")  # where rules act; in shadow they only feed the gate
EXAMPLES = 20


class StageError(ValueError):
    """A stage change that cannot be made; `status` is the HTTP answer, `detail` why."""

    def __init__(self, status: int, detail: Any) -> None:
        super().__init__(str(detail))
        self.status = status
        self.detail = detail


@dataclass
class Outcome:
    """What an evaluation or an action did, for the caller to announce after commit."""

    decisions: list[dict[str, Any]] = field(default_factory=list)
    notices: list[dict[str, Any]] = field(default_factory=list)


# --- reading the evidence ------------------------------------------------------------


def stage_windows(session: Session, task: Task, config: TaskConfig) -> Windows:
    """The closed windows that started in the current stage — the most recent
    `evaluation_windows(config)` of them — numbered by window index, with the stored metric
    row of every bucket."""
    recent = (
        select(Window.id, Window.window_start)
        .where(Window.task_id == task.id, Window.closed_at.is_not(None))
        .order_by(Window.window_start.desc())
        .limit(evaluation_windows(config))
    )
    if task.stage_changed_at is not None:
        recent = recent.where(Window.window_start >= task.stage_changed_at)
    ids = dict(session.execute(recent).all())
    by_window: dict[datetime, dict[str, dict[str, Any]]] = defaultdict(dict)
    if ids:
        rows = session.scalars(select(WindowMetrics).where(WindowMetrics.window_id.in_(list(ids))))
        for metrics in rows:
            by_window[ids[metrics.window_id]][metrics.bucket] = {
                name: getattr(metrics, name) for name in STORED
            }
    seconds = config.window_seconds
    return [(int(start.timestamp()) // seconds, by_window[start]) for start in sorted(by_window)]


def evaluation_windows(config: TaskConfig) -> int:
    """How many recent windows an evaluation reads: three times the longest run the rule can
    span, and never fewer than the gate needs or 100. A pass costs the same in week one
    and week ten of a canary."""
    policy = config.rollback
    span = policy.max_span_windows or policy.consecutive_windows * policy.max_pool_windows
    return max(3 * span, config.promotion.min_windows, 100)


def _window_start(number: int, config: TaskConfig) -> datetime:
    return from_index(number, config.window_seconds)


def rule_name(rule: Rule) -> str:
    scope = " per bucket" if rule.scope == "per_bucket" else ""
    return f"{rule.metric} {rule.op} {rule.threshold:g}{scope}"


def _verdict_view(v: Verdict, config: TaskConfig) -> dict[str, Any]:
    return {
        "window_start": _window_start(v.first_window, config).isoformat(),
        "window_end": (
            _window_start(v.last_window, config) + timedelta(seconds=config.window_seconds)
        ).isoformat(),
        "windows": v.windows,
        "num": v.num,
        "den": v.den,
        "estimate": v.estimate,
        "bound": v.bound,
        "threshold": v.threshold,
        "verdict": v.verdict,
    }


def _confidence(rule: Rule, config: TaskConfig) -> Any:
    return rule.confidence if rule.confidence is not None else config.rollback.confidence


def explain(task: str, outcome: CellOutcome, config: TaskConfig) -> str:
    """One sentence: why the task was rolled back."""
    firing = outcome.firing
    assert firing is not None
    where = "overall" if outcome.cell == ALL else f"on inputs of {outcome.cell} tokens"
    confidence = _confidence(outcome.rule, config)
    bound = "estimate" if confidence == "point" else f"{confidence:.0%} bound"
    if firing.how == "consecutive":
        last = firing.verdicts[-1]
        return (
            f"{task} rolled back: {outcome.rule.metric} {where} breached "
            f"{outcome.rule.op} {outcome.rule.threshold:g} in {len(firing.verdicts)} "
            f"consecutive windows (last: {last.num}/{last.den} = {last.estimate:.1%}, "
            f"{bound} {last.bound:.1%})."
        )
    if firing.how == "critical":
        return (
            f"{task} rolled back: {outcome.rule.metric} {where} crossed its critical line "
            f"{outcome.rule.critical:g} in one window ({bound} {firing.statistic:.1%})."
        )
    return (
        f"{task} rolled back: the CUSUM of {outcome.rule.metric} {where} reached "
        f"{firing.statistic:.1f} (h = {outcome.rule.h or 5.0:g}), evidence that it moved "
        f"past {outcome.rule.op} {outcome.rule.threshold:g} by {outcome.rule.min_effect or 0.05:g}."
    )


def _time_range(outcome: CellOutcome, config: TaskConfig) -> tuple[datetime, datetime]:
    firing = outcome.firing
    assert firing is not None
    first = firing.verdicts[0].first_window if firing.verdicts else firing.at_window
    start = _window_start(first, config)
    end = _window_start(firing.at_window, config) + timedelta(seconds=config.window_seconds)
    return start, end


def _in_cell(task: Task, config: TaskConfig, cell: str, start: datetime, end: datetime) -> Any:
    where = [Result.task_id == task.id, Result.ts >= start, Result.ts < end]
    judged = judged_buckets(config.length_buckets, config.max_input_tokens)
    bucket = bucket_of(Result.input_tokens, config.length_buckets)
    where.append(bucket == cell if cell != ALL else bucket.in_(judged))
    return where


def _models_seen(session: Session, where: Any) -> list[str]:
    return sorted(
        m
        for m in session.scalars(select(Result.edge_model).where(*where).distinct())
        if m is not None
    )


def _examples(session: Session, where: Any) -> list[str]:
    bad = or_(
        Result.outcome.in_(("conflict", "invalid")),
        Result.edge_error.is_not(None),
        Result.edge_valid.is_(False),
        Result.degraded.is_(True),
    )
    return list(
        session.scalars(
            select(Result.request_id).where(*where, bad).order_by(Result.ts).limit(EXAMPLES)
        )
    )


# --- stage changes -------------------------------------------------------------------


def _flag_version(session: Session, task_id: int) -> int | None:
    return session.scalar(select(Flag.version).where(Flag.task_id == task_id))


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
    """Move the task to `stage` with its flag, decision and audit entry, in this transaction.

    `at` is the clock of the pass that decided (a person's action: now); windows that
    start from then on are the new stage's evidence."""
    before = _flag_version(session, task.id)
    stage_before = task.stage
    task.stage, task.canary_step = stage, canary_step
    now = at or utcnow()
    task.stage_changed_at = now
    task.updated_at = now
    # The input-length baseline is the one of the new stage (DESIGN §3).
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
        flag_version_after=_flag_version(session, task.id),
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


def evaluate_task(
    session: Session, task: Task, runtime: TaskRuntime, now: datetime | None = None
) -> Outcome:
    """Run the task's rules over the windows closed in its stage; fire the first that fires."""
    session.refresh(task, with_for_update=True)
    config = runtime.config
    out = Outcome()
    if task.stage not in (*ACTIVE_STAGES, "shadow"):
        return out
    windows = stage_windows(session, task, config)
    outcomes = evaluate(config, windows)
    fired = [o for o in outcomes if o.firing is not None and o.rule.mode != "off"]
    if not fired or task.stage == "shadow":
        if config.promotion.auto_promote and task.stage in ("shadow", "canary") and not fired:
            decision = _auto_promote(session, task, config, windows, outcomes, now)
            if decision is not None:
                out.decisions.append(decision_view(decision, task.name))
        return out
    fired.sort(key=lambda o: (o.firing.at_window if o.firing else 0, o.rule_index))
    for outcome in fired:
        if outcome.rule.mode == "notify":
            out.notices.append(
                {
                    "task": task.name,
                    "action": "notify",
                    "rule": rule_name(outcome.rule),
                    "bucket": outcome.cell,
                    "explanation": explain(task.name, outcome, config).replace(
                        "rolled back", "would roll back (rule in notify mode)"
                    ),
                }
            )
            continue
        decision = _fire(session, task, config, outcome, now)
        if decision is not None:
            out.decisions.append(decision_view(decision, task.name))
        break
    return out


def _fire(
    session: Session, task: Task, config: TaskConfig, outcome: CellOutcome, now: datetime | None
) -> Decision | None:
    firing = outcome.firing
    assert firing is not None
    key = (
        f"{task.id}:{outcome.rule_index}:{outcome.cell}:{firing.at_window}:{task.stage_changed_at}"
    )
    if session.scalar(select(Decision.id).where(Decision.dedupe_key == key)) is not None:
        return None
    start, end = _time_range(outcome, config)
    where = _in_cell(task, config, outcome.cell, start, end)
    models = _models_seen(session, where)
    evidence = {
        "how": firing.how,
        "detector": outcome.rule.detector or config.rollback.detector,
        "confidence": _confidence(outcome.rule, config),
        "windows": [_verdict_view(v, config) for v in firing.verdicts],
        "statistic": firing.statistic,
        "models": models,
        "examples": _examples(session, where),
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
        dedupe_key=key,
        at=now,
    )
    for model in models:
        block(session, task, model, decision.id)
    return decision


def _auto_promote(
    session: Session,
    task: Task,
    config: TaskConfig,
    windows: Windows,
    outcomes: list[CellOutcome],
    now: datetime | None,
) -> Decision | None:
    """`promotion.auto_promote`: the policy promotes when the gate passes, unless the edge
    model now serving was blocked by a rollback (until a person lifts the block)."""
    from controlplane.settings import get_settings

    if config.error_cost >= get_settings().error_cost_veto:
        return None
    verdict = gate_verdict(task, config, windows, outcomes)
    if not verdict["passed"]:
        return None
    recent = windows[-config.promotion.min_windows :]
    start = _window_start(recent[0][0], config)
    end = _window_start(recent[-1][0], config) + timedelta(seconds=config.window_seconds)
    seen = set(
        _models_seen(session, [Result.task_id == task.id, Result.ts >= start, Result.ts < end])
    )
    if seen & set(blocked_models(session, task.id)):
        return None
    stage, step = next_stage(task, config)
    where = f"canary at {config.promotion.canary_steps[step]}%" if stage == "canary" else stage
    return change_stage(
        session,
        task,
        config,
        stage=stage,
        action="promote",
        actor="policy",
        reason=f"promoted to {where}: gate passed",
        canary_step=step,
        evidence={"forced": False, "gate": verdict, "models": sorted(seen)},
        at=now,
    )


def block(session: Session, task: Task, model: str, decision_id: int | None) -> None:
    exists = session.scalar(
        select(BlockedModel.id).where(
            BlockedModel.task_id == task.id,
            BlockedModel.model == model,
            BlockedModel.lifted_at.is_(None),
        )
    )
    if exists is None:
        session.add(BlockedModel(task_id=task.id, model=model, decision_id=decision_id))
        session.flush()


def blocked_models(session: Session, task_id: int) -> list[str]:
    return list(
        session.scalars(
            select(BlockedModel.model)
            .where(BlockedModel.task_id == task_id, BlockedModel.lifted_at.is_(None))
            .order_by(BlockedModel.model)
        )
    )


# --- the promotion gate ----------------------------------------------------------------


def gate(session: Session, task: Task, config: TaskConfig) -> dict[str, Any]:
    """The promotion gate (DESIGN §4) over the last `min_windows` windows closed in the stage."""
    windows = stage_windows(session, task, config)
    return gate_verdict(task, config, windows, evaluate(config, windows))


def gate_verdict(
    task: Task, config: TaskConfig, windows: Windows, outcomes: list[CellOutcome]
) -> dict[str, Any]:
    """The gate from the stage's windows and the rules' outcomes on them (no I/O)."""
    promotion = config.promotion
    recent = windows[-promotion.min_windows :]
    judged = judged_buckets(config.length_buckets, config.max_input_tokens)
    reasons: list[str] = []
    if len(recent) < promotion.min_windows:
        reasons.append(
            f"{len(recent)} of the {promotion.min_windows} windows needed have closed in {task.stage}"
        )
    buckets: dict[str, Any] = {}
    fail_limit = next(
        (
            r.threshold
            for r in config.rollback.rules
            if r.metric == "offload_fail_rate" and r.op == "<="
        ),
        None,
    )
    for bucket in [*judged, ALL]:
        members = judged if bucket == ALL else [bucket]
        rows = [w[b] for _, w in recent for b in members if b in w]
        results = sum(r["n_results"] for r in rows)
        agree, pairs = sum(r["n_agree"] for r in rows), sum(r["n_pairs"] for r in rows)
        fails, runs = sum(r["n_edge_fails"] for r in rows), sum(r["n_edge_runs"] for r in rows)
        interval = wilson(agree, pairs)
        fail_interval = wilson(fails, runs)
        view: dict[str, Any] = {
            "results": results,
            "pairs": pairs,
            "agreement": agree / pairs if pairs else None,
            "agreement_low": interval[0] if interval else None,
            "edge_fail_rate": fails / runs if runs else None,
            "edge_fail_rate_high": fail_interval[1] if fail_interval else None,
            "verdict": "pass",
        }
        if bucket != ALL and results == 0:
            view["verdict"] = "no traffic"
        elif pairs < promotion.min_samples_per_bucket:
            view["verdict"] = "insufficient evidence"
            reasons.append(
                f"bucket {bucket}: insufficient evidence, {pairs} pairs of the "
                f"{promotion.min_samples_per_bucket} needed"
            )
        elif interval is not None and interval[0] < promotion.agreement_lower_bound:
            view["verdict"] = "fail"
            reasons.append(
                f"bucket {bucket}: agreement lower bound {interval[0]:.1%} is under "
                f"{promotion.agreement_lower_bound:.1%}"
            )
        if fail_limit is not None and fail_interval is not None and fail_interval[1] > fail_limit:
            view["verdict"] = "fail"
            reasons.append(
                f"bucket {bucket}: edge failure rate upper bound {fail_interval[1]:.1%} is over "
                f"{fail_limit:.1%}"
            )
        buckets[bucket] = view
    firing = [o for o in outcomes if o.firing is not None and o.rule.mode != "off"]
    for o in firing:
        reasons.append(f"rule {rule_name(o.rule)} would fire in {o.cell}")
    return {
        "task": task.name,
        "stage": task.stage,
        "passed": not reasons,
        "windows": len(recent),
        "reasons": reasons,
        "buckets": buckets,
    }


# --- people's actions ------------------------------------------------------------------


def next_stage(task: Task, config: TaskConfig) -> tuple[str, int]:
    steps = config.promotion.canary_steps
    if task.stage == "cloud":
        return "shadow", 0
    if task.stage == "shadow":
        return ("canary", 0) if steps else ("full", 0)
    if task.stage == "canary":
        if task.canary_step + 1 < len(steps):
            return "canary", task.canary_step + 1
        return "full", 0
    raise StageError(
        409,
        f"stage: {task.stage!r} cannot be promoted"
        + (
            "; a rolled-back task is re-armed first (POST /v1/tasks/{task}/rearm)"
            if task.stage == "rolled_back"
            else ""
        ),
    )


def promote(
    session: Session,
    task: Task,
    config: TaskConfig,
    *,
    actor: str,
    reason: str,
    force: bool,
    veto: float,
) -> Decision:
    """Move the task one stage on. The gate guards every move that serves the edge more;
    `force` overrides it (audited), nothing overrides the error-cost veto."""
    session.refresh(task, with_for_update=True)
    stage, step = next_stage(task, config)
    if task.stage != "cloud" and config.error_cost >= veto:
        raise StageError(
            409,
            {
                "veto": f"error_cost {config.error_cost:g} is at or over the error-cost veto "
                f"{veto:g} (SHADOWPLANE_ERROR_COST_VETO): this task never leaves shadow",
            },
        )
    verdict = None
    if task.stage != "cloud":
        verdict = gate(session, task, config)
        if not verdict["passed"] and not force:
            raise StageError(409, {"gate": verdict})
    where = f"canary at {config.promotion.canary_steps[step]}%" if stage == "canary" else stage
    return change_stage(
        session,
        task,
        config,
        stage=stage,
        action="promote",
        actor=actor,
        reason=f"promoted to {where}: {reason}",
        canary_step=step,
        evidence={
            "forced": bool(force and verdict is not None and not verdict["passed"]),
            "gate": verdict,
        },
    )


def rollback(
    session: Session, task: Task, config: TaskConfig, *, actor: str, reason: str
) -> Decision:
    session.refresh(task, with_for_update=True)
    if task.stage in ("cloud", "rolled_back"):
        raise StageError(409, f"stage: {task.name} is in {task.stage}; nothing to roll back")
    return change_stage(
        session,
        task,
        config,
        stage="rolled_back",
        action="rollback",
        actor=actor,
        reason=f"rolled back by hand: {reason}",
    )


def rearm(session: Session, task: Task, config: TaskConfig, *, actor: str, reason: str) -> Decision:
    session.refresh(task, with_for_update=True)
    if task.stage != "rolled_back":
        raise StageError(
            409, f"stage: {task.name} is in {task.stage}; only a rolled-back task is re-armed"
        )
    return change_stage(
        session,
        task,
        config,
        stage="shadow",
        action="rearm",
        actor=actor,
        reason=f"re-armed to shadow: {reason}",
    )


def unblock(session: Session, task: Task, *, model: str, actor: str, reason: str) -> dict[str, Any]:
    row = session.scalars(
        select(BlockedModel).where(
            BlockedModel.task_id == task.id,
            BlockedModel.model == model,
            BlockedModel.lifted_at.is_(None),
        )
    ).one_or_none()
    if row is None:
        raise StageError(
            404,
            f"model: {model!r} is not blocked for {task.name}; blocked: "
            f"{', '.join(blocked_models(session, task.id)) or 'none'}",
        )
    row.lifted_at, row.lifted_by, row.lift_reason = utcnow(), actor, reason
    record(
        session,
        actor=actor,
        action="task.unblock",
        task=task.name,
        details={"model": model, "reason": reason},
    )
    session.flush()
    return {"task": task.name, "model": model, "blocked": blocked_models(session, task.id)}


def set_killed(
    session: Session,
    runtimes: dict[int, tuple[Task, TaskRuntime]],
    *,
    killed: bool,
    actor: str,
    reason: str,
) -> Decision:
    """The global kill switch: every flag gets a new version; stages are kept."""
    state = session.get(FlagState, 1, with_for_update=True)
    if state is None:
        state = FlagState(id=1, revision=0, killed=False)
        session.add(state)
    if state.killed == killed:
        raise StageError(
            409, "kill: already killed" if killed else "kill: not killed; nothing to lift"
        )
    state.killed, state.kill_reason = killed, reason if killed else None
    session.flush()
    action = "kill" if killed else "lift"
    for task, runtime in runtimes.values():
        flags.publish(session, task, runtime.config, f"{action}: {reason}")
    decision = Decision(
        task_id=None, action=action, actor=actor, reason=reason, evidence={"tasks": len(runtimes)}
    )
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


def list_decisions(
    session: Session, task: str | None = None, limit: int = 100
) -> list[dict[str, Any]]:
    query = (
        select(Decision, Task.name)
        .outerjoin(Task, Task.id == Decision.task_id)
        .order_by(Decision.id.desc())
        .limit(limit)
    )
    if task is not None:
        query = query.where(Task.name == task)
    return [decision_view(d, name) for d, name in session.execute(query)]


def evaluate_rollout(session: Session, task_id: int, now: datetime | None = None) -> Outcome:
    """`evaluate_task` for a task id (what a job or a pass holds), at the pass's clock."""
    from controlplane.metrics.service import runtimes

    found = runtimes(session).get(task_id)
    if found is None:
        return Outcome()
    return evaluate_task(session, *found, now)
