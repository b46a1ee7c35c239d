"""Sentences and evidence views for decisions (pure): why a rule fired, over which windows."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from controlplane.catalog.schemas import ResolvedRule, TaskConfig
from controlplane.metrics import lengths
from controlplane.metrics.fields import ALL
from controlplane.metrics.windows import from_index
from controlplane.rollout.detectors import CusumStep
from controlplane.rollout.policy import LABEL_METRICS, CellOutcome
from controlplane.rollout.spans import SpanFiring
from controlplane.rollout.verdicts import Verdict
from controlplane.timeutil import duration

# A CUSUM sentence lists the shares of at most this many windows (the latest).
LISTED = 8
# The most windows of a CUSUM's run a decision's evidence keeps (the latest).
STEPS_KEPT = 200


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
    over = f" over {duration(rule.span_seconds)}" if rule.span_seconds else ""
    return f"{what} {rule.op} {rule.threshold:g}{scope}{over}"


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


def step_view(step: CusumStep, config: TaskConfig, metric: str | None = None) -> dict[str, Any]:
    """One window of a CUSUM run, as recorded in a decision's evidence: its counts, its
    log-likelihood ratio, what the cap let count of it, and the running sum after it."""
    return {
        "window_start": window_start(step.window, config, metric).isoformat(),
        "window_end": window_start(step.window + 1, config, metric).isoformat(),
        "num": _count(step.num, metric),
        "den": _count(step.den, metric),
        **({"counts": "effective labels"} if metric in LABEL_METRICS else {}),
        "estimate": step.num / step.den if step.den else None,
        "contribution": round(step.raw, 4),
        "counted": round(step.counted, 4),
        "sum": round(step.total, 4),
    }


def run_evidence(outcome: CellOutcome, config: TaskConfig) -> dict[str, Any]:
    """A CUSUM firing's part of the decision's evidence: h, the cap, min_effect and the run
    window by window. A long run of sparse windows keeps its latest `STEPS_KEPT` windows
    and says how many earlier ones it left out. Empty for other firings."""
    firing = outcome.firing
    assert firing is not None
    if not firing.steps:
        return {}
    rule = outcome.rule
    return {
        "h": rule.h,
        "cap": rule.cap if firing.how == "capped_cusum" else None,
        "min_effect": rule.min_effect,
        "steps": [step_view(s, config, rule.metric) for s in firing.steps[-STEPS_KEPT:]],
        "steps_omitted": max(0, len(firing.steps) - STEPS_KEPT),
    }


def share(value: float | None) -> str:
    """A rate as a percentage: whole when it is one, else to a tenth ("46%", "46.7%")."""
    if value is None:
        return "no data"
    whole = round(value * 100)
    return f"{whole}%" if abs(value * 100 - whole) < 0.05 else f"{value:.1%}"


def _threshold(value: float) -> str:
    """0.9 → "0.90", 0.02 → "0.02", 0.005 → "0.005"."""
    return f"{value:.2f}" if round(value, 2) == value else f"{value:g}"


def _evidence(total: float, h: float) -> str:
    """The sum to one decimal, or more where one would show it below h (h = 0.04)."""
    for digits in range(1, 7):
        shown = f"{total:.{digits}f}"
        if float(shown) >= h:
            return shown
    return f"{total:g}"


def cusum_sentence(outcome: CellOutcome) -> str:
    """What a CUSUM firing rests on, checkable by hand: "evidence 6.0 ≥ 5 over 3 windows
    (each window counts at most 2): 46%, 52%, 50% vs 0.90"."""
    firing = outcome.firing
    assert firing is not None and firing.statistic is not None
    rule = outcome.rule
    steps = firing.steps
    windows = f"{len(steps)} window{'s' if len(steps) != 1 else ''}"
    capped = f" (each window counts at most {rule.cap:g})" if firing.how == "capped_cusum" else ""
    shares = [share(s.num / s.den if s.den else None) for s in steps[-LISTED:]]
    if len(steps) > LISTED:
        shares.insert(0, "…")
    return (
        f"evidence {_evidence(firing.statistic, rule.h)} ≥ {rule.h:g} over {windows}{capped}: "
        f"{', '.join(shares)} vs {_threshold(rule.threshold)}"
    )


def cash(value: float) -> str:
    """Money in a sentence: to the cent from 1 up ("1,540.14", "-1.07"), else to three
    significant digits ("0.0017", "-0.000912"), never a bare "-0.00"."""
    if abs(value) >= 1 or value == 0:
        return f"{value:,.2f}"
    return f"{value:.3g}"


def _tokens(counts: list[int] | None) -> str:
    middle = lengths.quantile(counts or [], 0.5)
    return "no data" if middle is None else f"about {middle:,.0f} tokens"


def span_sentence(task: str, outcome: CellOutcome, verb: str = "rolled back") -> str:
    """Why a span rule fired, checkable by hand from the evidence: the money and its
    interval (net_savings), or the index, its line and the medians (input_shift)."""
    firing = outcome.firing
    assert isinstance(firing, SpanFiring)
    rule = outcome.rule
    found = firing.evidence
    span = duration(int(found["span_seconds"]))
    if firing.how == "net_savings":
        fixed = found.get("fixed_costs")
        itemised = (
            " (" + ", ".join(f"{k} {cash(v)}" for k, v in fixed.items()) + ")" if fixed else ""
        )
        return (
            f"{task} {verb}: offloading cost more than it saved over the last {span}: "
            f"net savings {cash(found['net_savings'])} = savings {cash(found['savings'])} "
            f"(cloud baseline {cash(found['baseline_cost'])} − paid {cash(found['paid'])}: edge "
            f"{cash(found['edge_cost'])}, cloud {cash(found['cloud_cost'])}) − fixed costs "
            f"{cash(found['fixed_cost'])}{itemised}, over {found['results']:,} results; its "
            f"{found['interval']:.0%} interval reaches at most {cash(found['high'])}, below "
            f"{rule.threshold:g}."
        )
    quarters = ", ".join(
        f"{q['psi']:.2f}" for q in found.get("quarters", []) if q["psi"] is not None
    )
    return (
        f"{task} {verb}: input lengths shifted over the last {span}: population stability "
        f"index {found['psi']:.2f} against {found['baseline_source']}, above "
        f"{rule.threshold:g} in each quarter of the span ({quarters}); inputs are now "
        f"{_tokens(found['now'])} at the median, against {_tokens(found['baseline'])}. "
        "Re-grade before promoting again (re-grade, don't re-tune thresholds)."
    )


def explain(task: str, outcome: CellOutcome, config: TaskConfig) -> str:
    """One sentence: why the task was rolled back."""
    firing = outcome.firing
    assert firing is not None
    if isinstance(firing, SpanFiring):
        return span_sentence(task, outcome)
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
    return f"{task} rolled back: {what} {where}: {cusum_sentence(outcome)}."


def notice_sentence(task: str, outcome: CellOutcome, config: TaskConfig, stage: str = "") -> str:
    """What a rule in notify mode would have done; in shadow, what a span rule says."""
    if isinstance(outcome.firing, SpanFiring) and stage == "shadow":
        return span_sentence(task, outcome, "would roll back in canary (in shadow: notice only)")
    return explain(task, outcome, config).replace(
        "rolled back", "would roll back (rule in notify mode)"
    )


def time_range(outcome: CellOutcome, config: TaskConfig) -> tuple[datetime, datetime]:
    """The time the firing's windows cover."""
    firing = outcome.firing
    assert firing is not None
    metric = outcome.rule.metric
    if isinstance(firing, SpanFiring):
        first = firing.first_window
    elif firing.verdicts:
        first = firing.verdicts[0].first_window
    else:
        first = firing.steps[0].window if firing.steps else firing.at_window
    start = window_start(first, config, metric)
    end = window_start(firing.at_window, config, metric) + timedelta(
        seconds=window_seconds(config, metric)
    )
    return start, end


def breach_ranges(outcome: CellOutcome, config: TaskConfig) -> list[tuple[datetime, datetime]]:
    """The time each breaching verdict of the firing covers (a pool: all its windows); for
    a CUSUM, each window of the run that added evidence."""
    firing = outcome.firing
    assert firing is not None
    metric = outcome.rule.metric
    if isinstance(firing, SpanFiring):
        # A shift's last quarter holds the new inputs the next model must be judged on
        # (the whole span may be days of results); a cost firing says nothing of answers.
        if firing.how != "input_shift":
            return []
        start, end = time_range(outcome, config)
        return [(start + (end - start) * 3 / 4, end)]
    if firing.steps:
        return [
            (
                window_start(s.window, config, metric),
                window_start(s.window + 1, config, metric),
            )
            for s in firing.steps
            if s.counted > 0
        ]
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
