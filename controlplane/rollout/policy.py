"""A task's rollback policy applied to its closed windows (docs/evidence.md, "Rollouts"). Pure.

Rules judge only the buckets the edge may serve and their union as `all`; per-rule
overrides are resolved on the schema (`RollbackConfig.resolved_rules`). `route_acc` and
`failure_class` read the closed route-accuracy windows in effective labels instead of the
metric windows (docs/route-accuracy.md); `net_savings` and `input_shift` judge a trailing
span of the windows' `all` rows at each window close (`controlplane.rollout.spans`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controlplane.catalog.schemas import SPAN_METRICS, ResolvedRule, TaskConfig
from controlplane.ingest.buckets import bucket_labels
from controlplane.metrics.fields import ALL, RATES
from controlplane.metrics.shift import Baseline, SpanWindow
from controlplane.rollout.detectors import Firing, should_rollback
from controlplane.rollout.spans import SpanFiring, SpanVerdict, span_firing, span_verdicts
from controlplane.rollout.verdicts import CellWindow, Verdict, verdicts

# window number → bucket → stored metric row (counts as in WindowMetrics)
Windows = Sequence[tuple[int, Mapping[str, Mapping[str, Any]]]]
# route-accuracy window number → its row (`estimate`, `n_effective`, `failure_classes`)
LabelWindows = Sequence[tuple[int, Mapping[str, Any]]]
# The rules judged on route-accuracy windows.
LABEL_METRICS = ("route_acc", "failure_class")


@dataclass(frozen=True, slots=True)
class Spans:
    """What the span rules read: the stage's recent windows' `all` rows, the first window of
    the stage (no span reaches before it), the first window close to judge (the read may
    start later than the stage: a span cut short by it is not judged), and the baseline."""

    windows: Sequence[SpanWindow]
    origin: int
    judge_from: int
    baseline: Baseline | None = None


@dataclass(frozen=True, slots=True)
class CellOutcome:
    rule_index: int
    rule: ResolvedRule
    cell: str
    # Rate rules: the cell's counts and verdicts; span rules: the span windows and the
    # verdict at each window close.
    windows: Sequence[CellWindow | SpanWindow]
    verdicts: Sequence[Verdict | SpanVerdict]
    firing: Firing | SpanFiring | None


def judged_buckets(boundaries: Sequence[int], max_input_tokens: int | None) -> list[str]:
    """The buckets holding inputs the edge may serve (a bucket starting at or under the cap)."""
    labels = bucket_labels(boundaries)
    if max_input_tokens is None:
        return labels
    starts = [0, *boundaries]
    return [label for label, lo in zip(labels, starts, strict=True) if lo <= max_input_tokens]


def label_series(labelled: LabelWindows, rule: ResolvedRule) -> list[CellWindow]:
    """A label rule's (num, den) per closed route-accuracy window, in effective labels."""
    out = []
    for number, row in labelled:
        size = float(row.get("n_effective") or 0.0)
        if rule.metric == "route_acc":
            share = row.get("estimate")
        else:
            share = (row.get("failure_classes") or {}).get(rule.failure_class or "", 0.0)
        if share is None or not size > 0 or not math.isfinite(float(share)):
            out.append(CellWindow(number, 0.0, 0.0))
        else:
            out.append(CellWindow(number, float(share) * size, size))
    return out


def cell_series(
    windows: Windows, metric: str, cell: str, judged: Sequence[str]
) -> list[CellWindow]:
    """A cell's (num, den) per closed window; `all` sums the judged buckets."""
    if metric in LABEL_METRICS:
        raise ValueError(f"{metric} is judged on route-accuracy windows (label_series)")
    num_key, den_key = RATES[metric]
    out = []
    for number, rows in windows:
        members = judged if cell == ALL else [cell]
        present = [rows[b] for b in members if b in rows]
        out.append(
            CellWindow(
                number,
                sum(int(r[num_key]) for r in present),
                sum(int(r[den_key]) for r in present),
            )
        )
    return out


def evaluate(
    config: TaskConfig,
    windows: Windows,
    labelled: LabelWindows = (),
    spans: Spans | None = None,
) -> list[CellOutcome]:
    """Verdicts and firing of every rule (not `off`) in every judged cell; `labelled` are
    the closed route-accuracy windows of the stage, for the label rules, and `spans` what
    the span rules read (without it they are not judged)."""
    policy = config.rollback
    judged = judged_buckets(config.length_buckets, config.max_input_tokens)
    out: list[CellOutcome] = []
    for index, rule in enumerate(policy.resolved_rules()):
        if rule.mode == "off":
            continue
        if rule.metric in SPAN_METRICS:
            if spans is not None:
                found = span_verdicts(
                    spans.windows,
                    rule,
                    judge_from=spans.judge_from,
                    origin=spans.origin,
                    window_seconds=config.window_seconds,
                    fixed_cost_per_day=config.fixed_cost_per_day,
                    fixed_costs=config.fixed_costs,
                    baseline=spans.baseline,
                    cap=config.max_input_tokens,
                )
                out.append(
                    CellOutcome(index, rule, ALL, spans.windows, found, span_firing(rule, found))
                )
            continue
        by_label = rule.metric in LABEL_METRICS
        cells = [*judged, ALL] if rule.scope == "per_bucket" and not by_label else [ALL]
        for cell in cells:
            series = (
                label_series(labelled, rule)
                if by_label
                else cell_series(windows, rule.metric, cell, judged)
            )
            judged_here = verdicts(
                series,
                op=rule.op,
                threshold=rule.threshold,
                confidence=rule.confidence,
                min_samples=rule.min_samples,
                max_pool_windows=policy.max_pool_windows,
            )
            firing = should_rollback(
                series,
                judged_here,
                op=rule.op,
                threshold=rule.threshold,
                confidence=rule.confidence,
                detector=rule.detector,
                consecutive_windows=policy.consecutive_windows,
                max_span_windows=policy.span_windows,
                min_effect=rule.min_effect,
                h=rule.h,
                cap=rule.cap,
                critical_threshold=rule.critical,
            )
            out.append(CellOutcome(index, rule, cell, series, judged_here, firing))
    return out
