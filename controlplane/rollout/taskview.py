"""One task's rollout as the task page reads it: where it stands, what a promotion would
be checked against (the stage as the caller saw it), the gate now, the edge models a
rollback blocked with their eval runs, and what the span rules read (cost against the
cloud baseline, input lengths against the task's baseline) with what they say now."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.catalog import repository as catalog
from controlplane.catalog.schemas import (
    DAY,
    NET_SAVINGS_CONFIDENCE,
    SPAN_METRICS,
    ResolvedRule,
    TaskConfig,
    input_shift_rule,
)
from controlplane.evalsets.service import list_runs
from controlplane.grading.service import latest_grade
from controlplane.metrics import lengths, shift
from controlplane.metrics.period import window_span
from controlplane.metrics.shift import Baseline, SpanWindow
from controlplane.metrics.windows import from_index
from controlplane.models import BlockedModel, Task
from controlplane.rollout import repository, spans
from controlplane.rollout.explain import promoted_to, rule_name
from controlplane.rollout.service import gate
from controlplane.rollout.stages import config_now

# The stages the span rules judge in (in shadow a firing leaves a notice, never a rollback).
JUDGED_STAGES = ("shadow", "canary", "full")


def shown_stage(task: Task, canary_steps: list[int]) -> str:
    """The stage as `promote`'s `expected_stage` names it: `canary:<edge percent>` for a
    canary step, else the stage."""
    if task.stage == "canary" and canary_steps:
        return f"canary:{canary_steps[min(task.canary_step, len(canary_steps) - 1)]}"
    return task.stage


def task_state(session: Session, name: str) -> dict[str, Any] | None:
    """The task's stage, config version, gate verdict (None when its stored config does not
    parse), newest kept grade (None: never graded) and blocked models with their eval
    runs; None for an unknown task."""
    task = catalog.task_by_name(session, name)
    if task is None:
        return None
    config = config_now(session, task)
    steps = config.promotion.canary_steps if config is not None else []
    blocks = session.scalars(
        select(BlockedModel)
        .where(BlockedModel.task_id == task.id, BlockedModel.lifted_at.is_(None))
        .order_by(BlockedModel.model)
    )
    return {
        "task": task.name,
        "stage": task.stage,
        "expected_stage": shown_stage(task, steps),
        "stage_words": (
            promoted_to(task.stage, min(task.canary_step, len(steps) - 1), config)
            if config is not None and task.stage == "canary" and steps
            else task.stage
        ),
        "stage_changed_at": task.stage_changed_at,
        "needs_regrade": task.needs_regrade,
        "shifted_at": task.shifted_at,
        "config_version": task.config_version,
        "config_parses": config is not None,
        "regression_min_accuracy": (
            config.promotion.regression_min_accuracy if config is not None else None
        ),
        "gate": gate(session, task, config) if config is not None else None,
        "grade": latest_grade(session, task.name),
        "blocked": [
            {
                "model": block.model,
                "decision_id": block.decision_id,
                "blocked_at": block.blocked_at,
                "runs": list_runs(session, task, model=block.model),
            }
            for block in blocks
        ],
    }


def span_evidence(session: Session, name: str) -> dict[str, Any] | None:
    """What the span rules read of the task, up to its newest closed window: the cost
    components of each window over the net_savings span and their sum (`cost`), the input
    lengths of the input_shift span against the task's baseline (`lengths`), each with
    what its rule says now; and the task's re-grade mark. `cost` and `lengths` are None
    without a closed window or a config that parses; None for an unknown task."""
    task = catalog.task_by_name(session, name)
    if task is None:
        return None
    found: dict[str, Any] = {
        "needs_regrade": task.needs_regrade,
        "shifted_at": task.shifted_at,
        "cost": None,
        "lengths": None,
    }
    config = config_now(session, task)
    covered = window_span(session, task.id)
    if config is None or covered is None:
        return found
    seconds = config.window_seconds
    cost_rule = judging_rule(config, "net_savings")
    length_rule = input_shift_rule(config.rollback)
    cost_span = (
        cost_rule.span_windows(seconds) * seconds
        if cost_rule is not None
        else max(2, SPAN_METRICS["net_savings"] // seconds) * seconds
    )
    length_span = length_rule.span_windows(seconds) * seconds
    longest = timedelta(seconds=max(cost_span, length_span) + seconds)
    rows = shift.span_windows(session, task.id, seconds, max(covered[0], covered[1] - longest))
    if not rows:
        return found
    at = rows[-1].window
    judged = task.stage in JUDGED_STAGES
    # As the rules read it: no span reaches before the stage's (the offload's) first window.
    stage_origin = repository.span_origin(session, task, seconds)
    if stage_origin is None:
        stage_origin = rows[0].window
    first_window = int(covered[0].timestamp()) // seconds
    found["cost"] = cost_view(
        config,
        rows,
        at=at,
        span_seconds=cost_span,
        origin=max(first_window, stage_origin) if judged else first_window,
        stage_origin=stage_origin if judged else None,
        rule=cost_rule if judged else None,
    )
    found["lengths"] = lengths_view(
        config,
        rows,
        shift.baseline(session, task),
        at=at,
        span_seconds=length_span,
        stage_origin=stage_origin,
        rule=judging_rule(config, "input_shift") if judged else None,
        alert_rule=length_rule,
    )
    return found


def judging_rule(config: TaskConfig, metric: str) -> ResolvedRule | None:
    """The task's first rule on `metric` that is not off."""
    rules = config.rollback.resolved_rules()
    return next((r for r in rules if r.metric == metric and r.mode != "off"), None)


def _rule_view(rule: ResolvedRule, verdict: spans.SpanVerdict) -> dict[str, Any]:
    return {
        "name": rule_name(rule),
        "op": rule.op,
        "threshold": rule.threshold,
        "mode": rule.mode,
        "min_samples": rule.min_samples,
        "verdict": verdict.verdict,
        "statistic": verdict.statistic,
        "why": verdict.why,
    }


def cost_view(
    config: TaskConfig,
    rows: list[SpanWindow],
    *,
    at: int,
    span_seconds: int,
    origin: int,
    stage_origin: int | None,
    rule: ResolvedRule | None,
) -> dict[str, Any]:
    """The cost components of each window of the span ending with window `at` (never
    before `origin`), their sum as the net_savings rule computes it (`terms`), and the
    rule's verdict now (None without a rule judging in this stage)."""
    seconds = config.window_seconds
    first = max(at - max(1, span_seconds // seconds) + 1, origin)
    fixed = config.fixed_cost_per_day * seconds / DAY
    inside = [w for w in rows if first <= w.window <= at]
    verdict = (
        spans.judge_net_savings(
            rows,
            rule,
            at=at,
            origin=origin,
            window_seconds=seconds,
            fixed_cost_per_day=config.fixed_cost_per_day,
            fixed_costs=config.fixed_costs,
        )
        if rule is not None
        else None
    )
    if verdict is not None:
        terms = verdict.evidence
    else:
        terms = spans.net_savings_terms(
            inside,
            elapsed_windows=at - first + 1,
            window_seconds=seconds,
            fixed_cost_per_day=config.fixed_cost_per_day,
            level=NET_SAVINGS_CONFIDENCE,
        )
        if config.fixed_costs:
            share = (at - first + 1) * seconds / DAY
            terms["fixed_costs"] = {
                k: spans.money(v * share) for k, v in config.fixed_costs.items()
            }
    return {
        "since": from_index(first, seconds),
        "until": from_index(at + 1, seconds),
        "span_seconds": span_seconds,
        # What cut the span short: the stage's start, or the task's first window.
        "cut": (
            None
            if first == at - max(1, span_seconds // seconds) + 1
            else "stage"
            if first == stage_origin
            else "first_window"
        ),
        "fixed_cost_per_day": config.fixed_cost_per_day,
        "windows": [
            {
                "window_start": from_index(w.window, seconds),
                "results": w.n_results,
                "edge_cost": w.edge_cost,
                "cloud_cost": w.cloud_cost,
                "paid": w.edge_cost + w.cloud_cost,
                "baseline_cost": w.baseline_cost,
                "savings": w.savings,
                "fixed_cost": fixed,
                "net_savings": w.savings - fixed,
            }
            for w in inside
        ],
        "terms": terms,
        "rule": _rule_view(rule, verdict) if rule is not None and verdict is not None else None,
    }


def lengths_view(
    config: TaskConfig,
    rows: list[SpanWindow],
    baseline: Baseline | None,
    *,
    at: int,
    span_seconds: int,
    stage_origin: int,
    rule: ResolvedRule | None,
    alert_rule: ResolvedRule,
) -> dict[str, Any]:
    """The input lengths of the span ending with window `at` against the baseline, as the
    input-shift alert reads them, and the input_shift rule's verdict now (None without a
    rule judging in this stage)."""
    seconds = config.window_seconds
    until = from_index(at + 1, seconds)
    since = until - timedelta(seconds=span_seconds)
    now_rows = [w for w in rows if from_index(w.window, seconds) >= since]
    counts = lengths.add(w.input_hist for w in now_rows)
    base = list(baseline.counts) if baseline is not None else None
    out: dict[str, Any] = {
        "since": since,
        "until": until,
        "span_seconds": span_seconds,
        "bins": lengths.bin_labels(),
        "now": counts,
        "results": sum(counts),
        "median_now": lengths.quantile(counts, 0.5),
        "over_cap_now": shift.over_cap_share(now_rows),
        "baseline": baseline.document() if baseline is not None else None,
        "median_baseline": lengths.quantile(base, 0.5) if base else None,
        "over_cap_baseline": (
            baseline.over_cap / baseline.n
            if baseline is not None and baseline.over_cap is not None
            else None
        ),
        "psi": lengths.psi(counts, base) if base else None,
        "alert_line": config.alerts.input_shift,
        "alert_min_results": alert_rule.min_samples,
        "rule": None,
    }
    if rule is not None:
        verdict = spans.judge_input_shift(
            rows,
            rule,
            baseline,
            at=at,
            origin=stage_origin,
            window_seconds=seconds,
            cap=config.max_input_tokens,
        )
        out["rule"] = {**_rule_view(rule, verdict), "quarters": verdict.evidence.get("quarters")}
    return out
