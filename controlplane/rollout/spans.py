"""The two rules judged over a trailing span of windows (docs/evidence.md, "Cost and input
shift"), at each window close. Pure.

`net_savings`: the span's savings (cloud baseline − what was paid, shadow runs included)
minus the task's fixed costs prorated over the span's windows; **breach** when the upper
bound of its interval (the rule's confidence, 95% by default) is below the threshold. The
interval treats the span's windows as clusters of requests (a ratio estimator with the
windows' own spread, t with K − 1 degrees of freedom; docs/decisions.md says why).

`input_shift`: the span's input-length histogram against the task's baseline by the
population stability index (`metrics.lengths.psi`); **breach** when the whole span's
index and each of its four quarters' is above the threshold: a change that holds for the
whole span, so a burst shorter than half the span never fires (it raises the alert).

Both are **insufficient** until the span holds `min_samples` results (input_shift also
needs a baseline and a whole span inside the stage). A rule fires at its first breach.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any, Literal

from controlplane.catalog.schemas import ResolvedRule
from controlplane.metrics import lengths
from controlplane.metrics.shift import Baseline, SpanWindow, over_cap_share

QUARTERS = 4
SpanVerdictKind = Literal["breach", "ok", "insufficient"]


@dataclass(frozen=True, slots=True)
class SpanVerdict:
    """One window close's judgement over the span that ends with it."""

    first_window: int
    at_window: int
    verdict: SpanVerdictKind
    # net_savings: the interval's upper bound; input_shift: the whole span's index.
    statistic: float | None
    threshold: float
    evidence: dict[str, Any] = field(default_factory=dict)
    why: str = ""


@dataclass(frozen=True, slots=True)
class SpanFiring:
    how: Literal["net_savings", "input_shift"]
    at_window: int
    first_window: int
    statistic: float | None
    evidence: dict[str, Any]
    # Attributes every firing has (controlplane.rollout.detectors.Firing).
    verdicts: list[Any] = field(default_factory=list)
    steps: list[Any] = field(default_factory=list)


def t_quantile(level: float, df: int) -> float:
    """The two-sided Student t quantile for a `level` interval (0.95 → t_{0.975, df}): exact
    below 3 degrees of freedom; from 3 on the Cornish–Fisher expansion (Abramowitz & Stegun
    26.7.5), refined by Newton's method on the exact distribution (`t_within`), since the
    expansion alone is 0.12% short at 3 degrees of freedom and 0.8% at 99%."""
    z = NormalDist().inv_cdf(0.5 + level / 2)
    if df <= 0:
        return math.inf
    if df == 1:
        return math.tan(math.pi * level / 2)
    if df == 2:
        return level * math.sqrt(2 / (1 - level**2))
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    t = z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4
    scale = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    for _ in range(8):
        density = scale * (1 + t * t / df) ** (-(df + 1) / 2)
        step = (t_within(t, df) - level) / (2 * density)
        t -= step
        if abs(step) < 1e-12 * t:
            break
    return t


def t_within(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with `df` degrees of freedom, exactly (Abramowitz &
    Stegun 26.7.3 and 26.7.4: a finite series in cos θ, θ = atan(t / √df))."""
    theta = math.atan(t / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    series = 0.0
    if df % 2:
        term = math.cos(theta)
        for k in range(1, (df - 1) // 2 + 1):
            series += term
            term *= c2 * (2 * k) / (2 * k + 1)
        return 2 / math.pi * (theta + math.sin(theta) * series)
    term = 1.0
    for k in range(1, df // 2 + 1):
        series += term
        term *= c2 * (2 * k - 1) / (2 * k)
    return math.sin(theta) * series


def money(value: float) -> float:
    return round(value, 6)


def net_savings_terms(
    windows: Sequence[SpanWindow],
    *,
    elapsed_windows: int,
    window_seconds: int,
    fixed_cost_per_day: float,
    level: float,
) -> dict[str, Any]:
    """Every component of the span's net savings and its interval, in money and per 1k
    results: what a decision's evidence lists and a hand computation checks."""
    n = sum(w.n_results for w in windows)
    edge = sum(w.edge_cost for w in windows)
    cloud = sum(w.cloud_cost for w in windows)
    base = sum(w.baseline_cost for w in windows)
    savings = base - edge - cloud
    fixed = fixed_cost_per_day * elapsed_windows * window_seconds / 86400
    net = savings - fixed
    clusters = [w for w in windows if w.n_results > 0]
    k = len(clusters)
    half: float | None = None
    if k >= 2 and n > 0:
        mean = savings / n
        spread = sum((w.savings - mean * w.n_results) ** 2 for w in clusters)
        half = t_quantile(level, k - 1) * math.sqrt(spread * k / (k - 1))

    def per_1k(value: float) -> float | None:
        return money(value / n * 1000) if n else None

    return {
        "results": n,
        "windows": k,
        "span_seconds": elapsed_windows * window_seconds,
        "edge_cost": money(edge),
        "cloud_cost": money(cloud),
        "paid": money(edge + cloud),
        "baseline_cost": money(base),
        "savings": money(savings),
        "fixed_cost": money(fixed),
        "fixed_cost_per_day": fixed_cost_per_day,
        "net_savings": money(net),
        "interval": level,
        "low": money(net - half) if half is not None else None,
        "high": money(net + half) if half is not None else None,
        "per_1k": {
            "edge_cost": per_1k(edge),
            "cloud_cost": per_1k(cloud),
            "baseline_cost": per_1k(base),
            "savings": per_1k(savings),
            "fixed_cost": per_1k(fixed),
            "net_savings": per_1k(net),
        },
    }


def _span(
    windows: Sequence[SpanWindow], at: int, span: int, origin: int
) -> tuple[list[SpanWindow], int]:
    """The windows of the span ending with window `at` (never before `origin`), and the
    window it starts at."""
    first = max(at - span + 1, origin)
    return [w for w in windows if first <= w.window <= at], first


def judge_net_savings(
    windows: Sequence[SpanWindow],
    rule: ResolvedRule,
    *,
    at: int,
    origin: int,
    window_seconds: int,
    fixed_cost_per_day: float,
    fixed_costs: dict[str, float] | None = None,
) -> SpanVerdict:
    """The net_savings verdict at the close of window `at`."""
    assert rule.span_seconds is not None
    span = max(1, rule.span_seconds // window_seconds)
    inside, first = _span(windows, at, span, origin)
    level = float(rule.confidence) if rule.confidence != "point" else 0.95
    terms = net_savings_terms(
        inside,
        elapsed_windows=at - first + 1,
        window_seconds=window_seconds,
        fixed_cost_per_day=fixed_cost_per_day,
        level=level,
    )
    if fixed_costs:
        share = (at - first + 1) * window_seconds / 86400
        terms["fixed_costs"] = {name: money(v * share) for name, v in fixed_costs.items()}
    if terms["results"] < rule.min_samples:
        why = f"{terms['results']} results in the span, fewer than min_samples {rule.min_samples}"
        return SpanVerdict(first, at, "insufficient", None, rule.threshold, terms, why)
    if terms["high"] is None:
        why = "fewer than two windows with results in the span: no interval yet"
        return SpanVerdict(first, at, "insufficient", None, rule.threshold, terms, why)
    kind: SpanVerdictKind = "breach" if terms["high"] < rule.threshold else "ok"
    return SpanVerdict(first, at, kind, terms["high"], rule.threshold, terms)


def quarters(first: int, at: int) -> list[tuple[int, int]]:
    """The span [first, at] cut into four runs of windows as equal as whole windows allow;
    a span of fewer than four windows into one run per window (an empty run has no index,
    so it would keep the rule from ever firing)."""
    size = at - first + 1
    parts = max(1, min(QUARTERS, size))
    cuts = [first + round(size * q / parts) for q in range(parts + 1)]
    return [(cuts[q], cuts[q + 1] - 1) for q in range(parts)]


def judge_input_shift(
    windows: Sequence[SpanWindow],
    rule: ResolvedRule,
    baseline: Baseline | None,
    *,
    at: int,
    origin: int,
    window_seconds: int,
) -> SpanVerdict:
    """The input_shift verdict at the close of window `at`."""
    assert rule.span_seconds is not None
    span = max(1, rule.span_seconds // window_seconds)
    inside, first = _span(windows, at, span, origin)
    counts = lengths.add(w.input_hist for w in inside)
    n = sum(counts)
    evidence: dict[str, Any] = {
        "results": n,
        "span_seconds": (at - first + 1) * window_seconds,
        "bins": lengths.bin_labels(),
        "now": counts,
        "baseline": list(baseline.counts) if baseline is not None else None,
        "baseline_n": baseline.n if baseline is not None else 0,
        "baseline_source": baseline.source if baseline is not None else None,
        "over_cap_now": over_cap_share(inside),
        "over_cap_baseline": (
            baseline.over_cap / baseline.n
            if baseline is not None and baseline.over_cap is not None and baseline.n
            else None
        ),
    }
    if baseline is None:
        why = "no baseline: the task has no offload grade and was not promoted with one"
        return SpanVerdict(first, at, "insufficient", None, rule.threshold, evidence, why)
    whole = lengths.psi(counts, baseline.counts)
    evidence["psi"] = whole
    if n < rule.min_samples:
        why = f"{n} results in the span, fewer than min_samples {rule.min_samples}"
        return SpanVerdict(first, at, "insufficient", whole, rule.threshold, evidence, why)
    parts = []
    for lo, hi in quarters(at - span + 1, at):
        part = lengths.add(w.input_hist for w in inside if lo <= w.window <= hi)
        parts.append(
            {
                "first_window": lo,
                "last_window": hi,
                "results": sum(part),
                "psi": lengths.psi(part, baseline.counts),
            }
        )
    evidence["quarters"] = parts
    if at - span + 1 < origin:
        why = "the stage holds less than one whole span yet"
        return SpanVerdict(first, at, "insufficient", whole, rule.threshold, evidence, why)
    assert whole is not None
    held = all(p["psi"] is not None and p["psi"] > rule.threshold for p in parts)
    kind: SpanVerdictKind = "breach" if whole > rule.threshold and held else "ok"
    return SpanVerdict(first, at, kind, whole, rule.threshold, evidence)


def span_verdicts(
    windows: Sequence[SpanWindow],
    rule: ResolvedRule,
    *,
    judge_from: int,
    origin: int,
    window_seconds: int,
    fixed_cost_per_day: float = 0.0,
    fixed_costs: dict[str, float] | None = None,
    baseline: Baseline | None = None,
) -> list[SpanVerdict]:
    """The rule's verdict at the close of every window from `judge_from` on, oldest first."""
    out = []
    for window in windows:
        if window.window < judge_from:
            continue
        if rule.metric == "net_savings":
            out.append(
                judge_net_savings(
                    windows,
                    rule,
                    at=window.window,
                    origin=origin,
                    window_seconds=window_seconds,
                    fixed_cost_per_day=fixed_cost_per_day,
                    fixed_costs=fixed_costs,
                )
            )
        else:
            out.append(
                judge_input_shift(
                    windows,
                    rule,
                    baseline,
                    at=window.window,
                    origin=origin,
                    window_seconds=window_seconds,
                )
            )
    return out


def span_firing(rule: ResolvedRule, found: Sequence[SpanVerdict]) -> SpanFiring | None:
    """The first breach: where the rule fires."""
    for verdict in found:
        if verdict.verdict == "breach":
            how: Literal["net_savings", "input_shift"] = (
                "net_savings" if rule.metric == "net_savings" else "input_shift"
            )
            return SpanFiring(
                how, verdict.at_window, verdict.first_window, verdict.statistic, verdict.evidence
            )
    return None


def run_start(found: Sequence[SpanVerdict]) -> int | None:
    """Where the trailing run of breaches began (its first window close), or None when the
    latest verdict is not a breach; `insufficient` neither breaks nor extends a run."""
    start = None
    for verdict in reversed(found):
        if verdict.verdict == "ok":
            break
        if verdict.verdict == "breach":
            start = verdict.at_window
    return start
