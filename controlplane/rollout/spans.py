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

Both are **insufficient** until the stage holds one whole span and the span holds
`min_samples` results (input_shift also needs a baseline). A rule fires at its first breach.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any, Literal

import numpy

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


@dataclass(frozen=True, slots=True)
class Sums:
    """What net_savings reads of a run of windows, summed: results, costs, and the terms of
    the clusters' spread (Σ s², Σ s·n, Σ n² over windows, s a window's savings, n its
    results; a window without results adds nothing) and how many windows had results."""

    n: float = 0.0
    edge: float = 0.0
    cloud: float = 0.0
    base: float = 0.0
    ss: float = 0.0
    sn: float = 0.0
    nn: float = 0.0
    k: int = 0


def _columns(windows: Sequence[SpanWindow]) -> numpy.ndarray:
    """One row per window: n, edge, cloud, baseline, s², s·n, n², 1 when it has results."""
    if not windows:
        return numpy.zeros((0, 8))
    n = numpy.array([w.n_results for w in windows], dtype=float)
    edge = numpy.array([w.edge_cost for w in windows], dtype=float)
    cloud = numpy.array([w.cloud_cost for w in windows], dtype=float)
    base = numpy.array([w.baseline_cost for w in windows], dtype=float)
    s = base - edge - cloud
    return numpy.column_stack((n, edge, cloud, base, s * s, s * n, n * n, n > 0))


def _summed(rows: numpy.ndarray) -> Sums:
    """The column sums of a run of windows (pairwise, on the run alone: a huge window
    outside the run never costs the run its precision, as a running total would)."""
    n, edge, cloud, base, ss, sn, nn, k = (float(x) for x in rows.sum(axis=0))
    return Sums(n, edge, cloud, base, ss, sn, nn, int(round(k)))


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
    return terms_of(
        _summed(_columns(windows)),
        elapsed_windows=elapsed_windows,
        window_seconds=window_seconds,
        fixed_cost_per_day=fixed_cost_per_day,
        level=level,
    )


def terms_of(
    sums: Sums,
    *,
    elapsed_windows: int,
    window_seconds: int,
    fixed_cost_per_day: float,
    level: float,
) -> dict[str, Any]:
    """`net_savings_terms` from the span's sums. The clusters' spread
    Σ (s_w − μ n_w)² = Σ s² − 2μ Σ s·n + μ² Σ n², μ = S / N."""
    n = int(round(sums.n))
    edge, cloud, base = sums.edge, sums.cloud, sums.base
    savings = base - edge - cloud
    fixed = fixed_cost_per_day * elapsed_windows * window_seconds / 86400
    net = savings - fixed
    k = sums.k
    half: float | None = None
    if k >= 2 and n > 0:
        mean = savings / n
        spread = max(0.0, sums.ss - 2 * mean * sums.sn + mean * mean * sums.nn)
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


class Series:
    """The windows (oldest first) as columns, so that every window close of a pass sums its
    span with one call, and the span's input lengths (with how many were over the cap)."""

    def __init__(self, windows: Sequence[SpanWindow], *, histograms: bool = False) -> None:
        self.windows = list(windows)
        self.index = [w.window for w in self.windows]
        self.columns = _columns(self.windows)
        self.hists = numpy.zeros((len(self.windows), lengths.BINS), dtype=numpy.int64)
        self.over = numpy.zeros(len(self.windows), dtype=numpy.int64)
        self.capped = numpy.zeros(len(self.windows), dtype=bool)
        if histograms:
            for i, w in enumerate(self.windows):
                if w.input_hist:
                    held = list(w.input_hist)[: lengths.BINS]
                    self.hists[i, : len(held)] = held
                if w.n_over_cap is not None:
                    self.over[i], self.capped[i] = w.n_over_cap, True

    def bounds(self, first: int, at: int) -> tuple[int, int]:
        """Positions of the windows numbered first..at (inclusive) in the series."""
        return bisect_left(self.index, first), bisect_right(self.index, at)

    def between(self, first: int, at: int) -> list[SpanWindow]:
        lo, hi = self.bounds(first, at)
        return self.windows[lo:hi]

    def summed(self, first: int, at: int) -> Sums:
        lo, hi = self.bounds(first, at)
        return _summed(self.columns[lo:hi])

    def histogram(self, first: int, at: int) -> list[int]:
        lo, hi = self.bounds(first, at)
        return [int(c) for c in self.hists[lo:hi].sum(axis=0)]

    def over_cap(self, first: int, at: int) -> int | None:
        """How many inputs of the windows first..at were over the cap (None: no window knew
        the cap)."""
        lo, hi = self.bounds(first, at)
        return int(self.over[lo:hi].sum()) if self.capped[lo:hi].any() else None


def span_of(rule: ResolvedRule, window_seconds: int) -> int:
    """How many windows the rule's span holds (`ResolvedRule.span_windows`)."""
    return rule.span_windows(window_seconds)


def judge_net_savings(
    windows: Sequence[SpanWindow] | Series,
    rule: ResolvedRule,
    *,
    at: int,
    origin: int,
    window_seconds: int,
    fixed_cost_per_day: float,
    fixed_costs: dict[str, float] | None = None,
) -> SpanVerdict:
    """The net_savings verdict at the close of window `at`: insufficient until the stage
    holds one whole span (a young stage has seen only part of a day: fixed costs spread
    over the hours while savings follow the traffic) and `min_samples` results."""
    series = windows if isinstance(windows, Series) else Series(windows)
    span = span_of(rule, window_seconds)
    first = max(at - span + 1, origin)
    level = float(rule.confidence) if rule.confidence != "point" else 0.95
    terms = terms_of(
        series.summed(first, at),
        elapsed_windows=at - first + 1,
        window_seconds=window_seconds,
        fixed_cost_per_day=fixed_cost_per_day,
        level=level,
    )
    if fixed_costs:
        share = (at - first + 1) * window_seconds / 86400
        # The largest first: a stored config's keys come back in no order the team wrote.
        items = sorted(fixed_costs.items(), key=lambda item: (-item[1], item[0]))
        terms["fixed_costs"] = {name: money(v * share) for name, v in items}
    if at - span + 1 < origin:
        why = "the stage holds less than one whole span yet"
        return SpanVerdict(first, at, "insufficient", None, rule.threshold, terms, why)
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
    windows: Sequence[SpanWindow] | Series,
    rule: ResolvedRule,
    baseline: Baseline | None,
    *,
    at: int,
    origin: int,
    window_seconds: int,
    cap: int | None = None,
) -> SpanVerdict:
    """The input_shift verdict at the close of window `at`. With a routing cap (`cap`,
    max_input_tokens) that the baseline was counted against too, the octave holding the
    cap is split at it: inputs that move over the cap are a shift even within one octave."""
    series = windows if isinstance(windows, Series) else Series(windows, histograms=True)
    span = span_of(rule, window_seconds)
    first = max(at - span + 1, origin)
    inside = series.between(first, at)
    counts = series.histogram(first, at)
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
    reference = list(baseline.counts)
    split = cap is not None and baseline.over_cap is not None and baseline.cap in (None, cap)

    def compared(part: list[int], over: int | None) -> list[int]:
        if not split or over is None or cap is None:
            return part
        return lengths.split_at_cap(part, over, cap)

    if split:
        assert cap is not None and baseline.over_cap is not None
        reference = lengths.split_at_cap(reference, baseline.over_cap, cap)
        if series.over_cap(first, at) is None:  # windows from before the cap was counted
            split, reference = False, list(baseline.counts)
    whole = lengths.psi(compared(counts, series.over_cap(first, at)), reference)
    evidence["psi"] = whole
    evidence["split_at_cap"] = cap if split else None
    if n < rule.min_samples:
        why = f"{n} results in the span, fewer than min_samples {rule.min_samples}"
        return SpanVerdict(first, at, "insufficient", whole, rule.threshold, evidence, why)
    parts = []
    for lo, hi in quarters(at - span + 1, at):
        part = series.histogram(lo, hi)
        parts.append(
            {
                "first_window": lo,
                "last_window": hi,
                "results": sum(part),
                "psi": lengths.psi(compared(part, series.over_cap(lo, hi)), reference),
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
    cap: int | None = None,
) -> list[SpanVerdict]:
    """The rule's verdict at the close of every window from `judge_from` on, oldest first."""
    # Only the windows the judged spans reach (the read may reach further for another rule).
    reach = judge_from - span_of(rule, window_seconds) + 1
    series = Series(
        [w for w in windows if w.window >= reach], histograms=rule.metric == "input_shift"
    )
    out = []
    for window in series.windows:
        if window.window < judge_from:
            continue
        if rule.metric == "net_savings":
            out.append(
                judge_net_savings(
                    series,
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
                    series,
                    rule,
                    baseline,
                    at=window.window,
                    origin=origin,
                    window_seconds=window_seconds,
                    cap=cap,
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
