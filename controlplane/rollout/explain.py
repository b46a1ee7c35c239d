"""Sentences and evidence views for decisions (pure): why a rule fired, over which windows."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from controlplane.catalog.schemas import ResolvedRule, TaskConfig
from controlplane.metrics.fields import ALL
from controlplane.metrics.windows import from_index
from controlplane.rollout.policy import LABEL_METRICS, CellOutcome
from controlplane.rollout.verdicts import Verdict


def window_seconds(config: TaskConfig, metric: str | None = None) -> int:
    """How long the windows a rule on `metric` judges are: label rules judge the longer
    route-accuracy windows."""
    if metric in LABEL_METRICS:
        return config.review.route_acc_window_seconds
    return config.window_seconds


def window_start(number: int, config: TaskConfig, metric: str | None = None) -> datetime:
    return from_index(number, window_seconds(config, metric))


def rule_name(rule: ResolvedRule) -> str:
    scope = " per bucket" if rule.scope == "per_bucket" else ""
    what = f"failure_class {rule.failure_class}" if rule.failure_class else rule.metric
    return f"{what} {rule.op} {rule.threshold:g}{scope}"


def _count(value: float, metric: str | None) -> float:
    """Label rules count effective labels: fractions, shown to three places."""
    return round(value, 3) if metric in LABEL_METRICS else value


def verdict_view(v: Verdict, config: TaskConfig, metric: str | None = None) -> dict[str, Any]:
    return {
        "window_start": window_start(v.first_window, config, metric).isoformat(),
        "window_end": (
            window_start(v.last_window, config, metric)
            + timedelta(seconds=window_seconds(config, metric))
        ).isoformat(),
        "windows": v.windows,
        "num": _count(v.num, metric),
        "den": _count(v.den, metric),
        **({"counts": "effective labels"} if metric in LABEL_METRICS else {}),
        "estimate": v.estimate,
        "bound": v.bound,
        "threshold": v.threshold,
        "verdict": v.verdict,
    }


def explain(task: str, outcome: CellOutcome, config: TaskConfig) -> str:
    """One sentence: why the task was rolled back."""
    firing = outcome.firing
    assert firing is not None
    where = "overall" if outcome.cell == ALL else f"on inputs of {outcome.cell} tokens"
    level = outcome.rule.confidence
    bound = "estimate" if level == "point" else f"{level:.0%} bound"
    metric = outcome.rule.metric
    what: str = metric
    if metric == "failure_class":
        what = f"the share of edge answers with failure class {outcome.rule.failure_class}"
    elif metric == "route_acc":
        what = "route accuracy from labels"
    if firing.how == "consecutive":
        last = firing.verdicts[-1]
        counted = (
            f"{last.estimate:.1%} of {last.den:.1f} effective labels"
            if metric in LABEL_METRICS
            else f"{last.num}/{last.den} = {last.estimate:.1%}"
        )
        return (
            f"{task} rolled back: {what} {where} breached "
            f"{outcome.rule.op} {outcome.rule.threshold:g} in {len(firing.verdicts)} "
            f"consecutive windows (last: {counted}, {bound} {last.bound:.1%})."
        )
    if firing.how == "critical":
        return (
            f"{task} rolled back: {what} {where} crossed its critical line "
            f"{outcome.rule.critical:g} in one window ({bound} {firing.statistic:.1%})."
        )
    return (
        f"{task} rolled back: the CUSUM of {what} {where} reached "
        f"{firing.statistic:.1f} (h = {outcome.rule.h:g}), evidence that it moved "
        f"past {outcome.rule.op} {outcome.rule.threshold:g} by {outcome.rule.min_effect:g}."
    )


def notice_sentence(task: str, outcome: CellOutcome, config: TaskConfig) -> str:
    """What a rule in notify mode would have done."""
    return explain(task, outcome, config).replace(
        "rolled back", "would roll back (rule in notify mode)"
    )


def time_range(outcome: CellOutcome, config: TaskConfig) -> tuple[datetime, datetime]:
    """The time the firing's windows cover."""
    firing = outcome.firing
    assert firing is not None
    metric = outcome.rule.metric
    first = firing.verdicts[0].first_window if firing.verdicts else firing.at_window
    start = window_start(first, config, metric)
    end = window_start(firing.at_window, config, metric) + timedelta(
        seconds=window_seconds(config, metric)
    )
    return start, end


def breach_ranges(outcome: CellOutcome, config: TaskConfig) -> list[tuple[datetime, datetime]]:
    """The time each breaching verdict of the firing covers (a pool: all its windows)."""
    firing = outcome.firing
    assert firing is not None
    metric = outcome.rule.metric
    return [
        (
            window_start(v.first_window, config, metric),
            window_start(v.last_window, config, metric)
            + timedelta(seconds=window_seconds(config, metric)),
        )
        for v in firing.verdicts
        if v.verdict == "breach"
    ]


def promoted_to(stage: str, step: int, config: TaskConfig) -> str:
    """Where a promotion goes, in words: `canary at 5%`, `shadow`, `full`."""
    return f"canary at {config.promotion.canary_steps[step]}%" if stage == "canary" else stage
