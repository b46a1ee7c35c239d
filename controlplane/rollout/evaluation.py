"""The policy pass over one task, as the scheduler, a Celery job or `shadowplane tick` runs
it: the task's rules over the windows closed in its stage fire a rollback (blocking the
edge models seen, queueing the regression review items) or, with `auto_promote`, promote;
notify-mode rules leave a notice. Judged without locks, then again under them
(docs/decisions.md, "Rollouts")."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from controlplane.catalog.schemas import SPAN_METRICS, TaskConfig
from controlplane.catalog.service import TaskRuntime, runtimes
from controlplane.evalsets.service import fill_regression
from controlplane.grading.service import grade_held
from controlplane.models import Decision, Task
from controlplane.models.base import utcnow
from controlplane.notify.documents import notice_document
from controlplane.notify.outbox import add_event
from controlplane.review.regression import queue_regression
from controlplane.review.repository import drop_unwaited_priority
from controlplane.rollout import flags, repository
from controlplane.rollout import gate as gates
from controlplane.rollout.explain import (
    breach_ranges,
    explain,
    notice_sentence,
    rule_name,
    run_evidence,
    time_range,
    verdict_view,
    window_start,
)
from controlplane.rollout.policy import CellOutcome, Windows, evaluate
from controlplane.rollout.spans import SpanFiring, SpanVerdict, run_start
from controlplane.rollout.stages import (
    announce,
    change_stage,
    config_now,
    mark_regrade,
    promote_next,
)

ACTIVE_STAGES = ("canary", "full")  # where rules act; in shadow they only feed the gate


@dataclass
class Outcome:
    """What an evaluation did: its decisions and notices (already in the outbox)."""

    decisions: list[dict[str, Any]] = field(default_factory=list)
    notices: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _Judgement:
    notices: list[dict[str, Any]]
    fire: CellOutcome | None = None
    promote: dict[str, Any] | None = None  # the gate's verdict and the models seen
    # The input_shift rule fires too: whichever rule rolls back, the task needs a re-grade.
    shifted: bool = False


def _judge(
    session: Session, task: Task, config: TaskConfig, veto: float, now: datetime, *, locked: bool
) -> _Judgement:
    """What the rules say about the task now; reads only, but for the grade an
    auto-promotion out of shadow keeps as today's once the locks are `locked`.

    In shadow nothing rolls back: the span rules (cost, input shift) leave a notice, and
    a rule that fires — but net_savings, shadow is meant to cost — holds auto-promotion."""
    windows = repository.stage_windows(session, task, config)
    outcomes = evaluate(
        config,
        windows,
        repository.stage_label_windows(session, task, config),
        repository.stage_spans(session, task, config, windows, now),
    )
    fired = [o for o in outcomes if o.firing is not None and o.rule.mode != "off"]
    if task.stage == "shadow":
        judgement = _Judgement(
            [
                notice
                for o in fired
                if o.rule.metric in SPAN_METRICS
                and (notice := _notice(session, task, o, config)) is not None
            ]
        )
        holding = [o for o in fired if o.rule.metric != "net_savings"]
        if config.promotion.auto_promote and not holding:
            judgement.promote = _auto_promotion(
                session, task, config, windows, outcomes, veto, now, locked=locked
            )
        return judgement
    if not fired:
        judgement = _Judgement([])
        if config.promotion.auto_promote and task.stage == "canary":
            judgement.promote = _auto_promotion(
                session, task, config, windows, outcomes, veto, now, locked=locked
            )
        return judgement
    fired.sort(key=lambda o: (o.firing.at_window if o.firing else 0, o.rule_index))
    notices = []
    for outcome in fired:
        if outcome.rule.mode == "notify":
            notice = _notice(session, task, outcome, config)
            if notice is not None:
                notices.append(notice)
            continue
        if repository.decided(session, _dedupe_key(task, outcome)):
            return _Judgement(notices)
        shifted = any(
            o.rule.metric == "input_shift" and o.rule.mode == "auto_rollback" for o in fired
        )
        return _Judgement(notices, fire=outcome, shifted=shifted)
    return _Judgement(notices)


def _notice(
    session: Session, task: Task, outcome: CellOutcome, config: TaskConfig
) -> dict[str, Any] | None:
    """The notice a firing rule leaves without acting, unless this stage already has it: a
    rate rule's once per firing window; a span rule's once per run of breaches."""
    notice: dict[str, Any] = {
        "task": task.name,
        "action": "notify",
        "rule": rule_name(outcome.rule),
        "bucket": outcome.cell,
        # The end of the window at which the rule fired: with the rule and bucket,
        # what makes the notice the same one at the next pass.
        "window_end": time_range(outcome, config)[1].isoformat(),
        "explanation": notice_sentence(task.name, outcome, config, task.stage),
    }
    if not isinstance(outcome.firing, SpanFiring):
        return None if repository.noticed(session, task, notice) else notice
    judged = [v for v in outcome.verdicts if isinstance(v, SpanVerdict)]
    began = run_start(judged)
    ongoing = began is not None and began == judged[0].at_window
    if began is not None:
        notice["window_end"] = window_start(began + 1, config).isoformat()
    notice["evidence"] = outcome.firing.evidence
    return None if repository.noticed_run(session, task, notice, ongoing=ongoing) else notice


def _auto_promotion(
    session: Session,
    task: Task,
    config: TaskConfig,
    windows: Windows,
    outcomes: list[CellOutcome],
    veto: float,
    now: datetime,
    *,
    locked: bool,
) -> dict[str, Any] | None:
    """`promotion.auto_promote`: the policy promotes when the gate passes — and, out of
    shadow, the task's grade is `offload` — unless the error cost is at the veto, or the
    edge model now serving was blocked by a rollback (until a person lifts the block). The
    policy never forces."""
    if config.error_cost >= veto or task.needs_regrade:
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
    promotion: dict[str, Any] = {"forced": False, "gate": verdict, "models": sorted(seen)}
    if task.stage == "shadow":
        graded = grade_held(session, task, config, veto=veto, now=now, keep=locked)
        if gates.grade_block(graded, config) is not None:
            return None
        promotion["grade"] = gates.grade_evidence(graded)
    return promotion


def _dedupe_key(task: Task, outcome: CellOutcome) -> str:
    """The decision's unique key (task, rule, cell, last window of the run, stage start):
    a second guard against deciding the same run twice."""
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
    clock = now or utcnow()
    judgement = _judge(session, task, config, veto, clock, locked=False)
    if judgement.fire is not None or judgement.promote is not None:
        # About to change the task: take the locks in order, then judge on what they hold.
        flags.lock_state(session)
        session.refresh(task, with_for_update=True)
        config = config_now(session, task) or config
        if task.stage not in (*ACTIVE_STAGES, "shadow"):
            return out
        judgement = _judge(session, task, config, veto, clock, locked=True)
    for notice in judgement.notices:
        add_event(session, kind="notice", task=task.name, document=notice_document(notice))
        out.notices.append(notice)
    decision = None
    if judgement.fire is not None:
        decision = _fire(session, task, config, judgement.fire, now)
    elif judgement.promote is not None:
        decision = promote_next(
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
    if decision is not None and judgement.fire is not None and judgement.shifted:
        # Re-grade, don't re-tune: no promotion until a grade over traffic since now says
        # offload (controlplane.grading clears the mark). Marked after the rollback is
        # announced, so receivers hear of the rollback before the mark that points to it.
        out.decisions.append(mark_regrade(session, task, decision, at=now))
    return out


def _fire(
    session: Session, task: Task, config: TaskConfig, outcome: CellOutcome, now: datetime | None
) -> Decision:
    firing = outcome.firing
    assert firing is not None
    start, end = time_range(outcome, config)
    where = repository.in_cell(task, config, outcome.cell, start, end)
    models = repository.models_seen(session, where)
    evidence: dict[str, Any]
    if isinstance(firing, SpanFiring):
        evidence = {
            "how": firing.how,
            "span": firing.evidence,
            "statistic": firing.statistic,
            "window_start": start.isoformat(),
            "window_end": end.isoformat(),
            "models": models,
            "examples": (
                # The longest inputs of the span's last window: one window's rows sorted,
                # whatever the span, while the locks are held.
                repository.longest_inputs(
                    session,
                    repository.in_time(task, end - timedelta(seconds=config.window_seconds), end),
                )
                if firing.how == "input_shift"
                else []
            ),
            "explanation": explain(task.name, outcome, config),
        }
    else:
        evidence = {
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
    # An item it moved that reviewers had already labelled enters the regression set now.
    fill_regression(session, task)
    # A rollback that blocked no model (and no earlier block waits on its sample) queues it
    # as any other item: nothing will wait on it.
    drop_unwaited_priority(session, task.id)
    return decision


def evaluate_rollout(
    session: Session, task_id: int, now: datetime | None = None, *, veto: float
) -> Outcome:
    """`evaluate_task` for a task id (what a job or a pass holds), at the pass's clock."""
    found = runtimes(session).get(task_id)
    if found is None:
        return Outcome()
    return evaluate_task(session, *found, now, veto=veto)
