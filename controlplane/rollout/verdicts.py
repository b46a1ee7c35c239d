"""Verdicts per closed window, rule and cell (docs/evidence.md, "Rollouts"). Pure.

A window's verdict is `breach` when a one-sided Wilson bound of the rate at the rule's
confidence is on the wrong side of the threshold (`<=` rules: the lower bound above it;
`>=` rules: the upper bound below it), `ok` when conclusive and not a breach, and
`insufficient` when even after pooling there is too little data. A window with fewer
than `min_samples` is pooled with the following windows of its cell, at most
`max_pool_windows` in all; the pool gives one verdict when it has enough samples (or
when its last window closes) and counts once. `confidence: point` judges the estimate
itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist
from typing import Literal

from controlplane.metrics.stats import wilson

Op = Literal["<=", ">="]
Confidence = float | Literal["point"]
VerdictKind = Literal["breach", "ok", "insufficient"]


@dataclass(frozen=True, slots=True)
class CellWindow:
    """One closed window's counts for one rule and cell; `window` numbers windows in order.
    Label-based metrics count in effective labels, so num and den may be fractional."""

    window: int
    num: float
    den: float


@dataclass(frozen=True, slots=True)
class Verdict:
    first_window: int
    last_window: int
    num: float
    den: float
    estimate: float | None
    bound: float | None
    threshold: float
    verdict: VerdictKind

    @property
    def windows(self) -> int:
        return self.last_window - self.first_window + 1


@lru_cache(maxsize=64)
def z_for(confidence: float) -> float:
    """The one-sided normal quantile: 0.80 → 0.8416, 0.95 → 1.6449."""
    return NormalDist().inv_cdf(confidence)


def one_sided_bound(num: float, den: float, op: Op, confidence: Confidence) -> float | None:
    """The bound a breach is judged on: for `<=` rules the lower Wilson bound (the rate is at
    least this), for `>=` rules the upper one (the rate is at most this); None without data."""
    if confidence == "point":
        return num / den if den > 0 else None
    interval = wilson(num, den, z_for(confidence))
    if interval is None:
        return None
    return interval[0] if op == "<=" else interval[1]


def is_breach(bound: float, op: Op, threshold: float) -> bool:
    return bound > threshold if op == "<=" else bound < threshold


def judge(
    windows: Sequence[CellWindow], op: Op, threshold: float, confidence: Confidence
) -> Verdict:
    num = sum(w.num for w in windows)
    den = sum(w.den for w in windows)
    bound = one_sided_bound(num, den, op, confidence)
    kind: VerdictKind = "ok"
    if bound is None:
        kind = "insufficient"
    elif is_breach(bound, op, threshold):
        kind = "breach"
    return Verdict(
        windows[0].window,
        windows[-1].window,
        num,
        den,
        num / den if den else None,
        bound,
        threshold,
        kind,
    )


def verdicts(
    windows: Sequence[CellWindow],
    *,
    op: Op,
    threshold: float,
    confidence: Confidence,
    min_samples: int,
    max_pool_windows: int,
) -> list[Verdict]:
    """The verdicts of a cell's closed windows, oldest first; a pool still filling gives none yet."""
    out: list[Verdict] = []
    pool: list[CellWindow] = []
    for window in windows:
        pool.append(window)
        den = sum(w.den for w in pool)
        if den >= min_samples:
            out.append(judge(pool, op, threshold, confidence))
            pool = []
        elif len(pool) >= max_pool_windows:
            verdict = judge(pool, op, threshold, confidence)
            out.append(
                Verdict(
                    verdict.first_window,
                    verdict.last_window,
                    verdict.num,
                    verdict.den,
                    verdict.estimate,
                    verdict.bound,
                    threshold,
                    "insufficient",
                )
            )
            pool = []
    return out
