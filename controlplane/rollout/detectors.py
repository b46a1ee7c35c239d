"""`should_rollback` (docs/evidence.md, "Rollouts"): a pure function of one rule's verdict
history in one cell.

Four detectors: `consecutive`, `capped_cusum` (the default: each window's evidence is
capped, so no single window fires it), `cusum` and the `critical` tripwire. The first point
where the rule fires is returned, so an evaluation that runs late still sees it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from controlplane.catalog.schemas import (
    DEFAULT_CAP,
    DEFAULT_DETECTOR,
    DEFAULT_H,
    DEFAULT_MIN_EFFECT,
    RATE_FLOOR,
    Detector,
)
from controlplane.rollout.verdicts import (
    CellWindow,
    Confidence,
    Op,
    Verdict,
    is_breach,
    one_sided_bound,
)


@dataclass(frozen=True, slots=True)
class CusumStep:
    """One closed window in a CUSUM: its counts, its log-likelihood ratio (`raw`), what the
    cap let count of it (`counted`) and the running sum after it (`total`)."""

    window: int
    num: float
    den: float
    raw: float
    counted: float
    total: float


@dataclass(frozen=True, slots=True)
class Firing:
    how: Literal["consecutive", "cusum", "capped_cusum", "critical"]
    at_window: int
    # The verdicts of the breaching run (consecutive), or the window(s) that tripped.
    verdicts: list[Verdict] = field(default_factory=list)
    statistic: float | None = None
    # CUSUM detectors: the run that reached `h`, every window since the sum last stood at 0.
    steps: list[CusumStep] = field(default_factory=list)


def consecutive(
    history: Sequence[Verdict], consecutive_windows: int, max_span_windows: int
) -> Firing | None:
    run: list[Verdict] = []
    for verdict in history:
        if verdict.verdict == "ok":
            run = []
        elif verdict.verdict == "breach":
            run.append(verdict)
            if run[-1].last_window - run[0].first_window + 1 > max_span_windows:
                run = [verdict]
            if len(run) >= consecutive_windows:
                return Firing("consecutive", verdict.last_window, list(run))
    return None


def llr_weights(op: Op, threshold: float, min_effect: float) -> tuple[float, float]:
    """The log-likelihood ratio, 'moved by min_effect' over 'at threshold', of one counted
    sample (the rate's numerator) and of one uncounted sample. Rates are read within
    RATE_FLOOR of 0 and 1 (a config's min_effect is at least ten times that)."""
    p0 = min(max(threshold, RATE_FLOOR), 1 - RATE_FLOOR)
    p1 = threshold + min_effect if op == "<=" else threshold - min_effect
    p1 = min(max(p1, RATE_FLOOR), 1 - RATE_FLOOR)
    return math.log(p1 / p0), math.log((1 - p1) / (1 - p0))


def cusum_steps(
    windows: Sequence[CellWindow], op: Op, threshold: float, min_effect: float, cap: float
) -> list[CusumStep]:
    """Every window's step of the Bernoulli CUSUM, each window counting at most `cap`."""
    hit, miss = llr_weights(op, threshold, min_effect)
    total = 0.0
    out = []
    for window in windows:
        raw = window.num * hit + (window.den - window.num) * miss
        if math.isnan(raw):  # counts that are no numbers: no data, neither evidence nor reset
            raw = 0.0
        counted = float(min(raw, cap))
        total = max(0.0, total + counted)
        out.append(CusumStep(window.window, window.num, window.den, raw, counted, total))
    return out


def capped_cusum(
    windows: Sequence[CellWindow],
    op: Op,
    threshold: float,
    min_effect: float,
    h: float,
    cap: float,
) -> Firing | None:
    """The first window at which the capped CUSUM reaches `h`, with its run of evidence."""
    run: list[CusumStep] = []
    for step in cusum_steps(windows, op, threshold, min_effect, cap):
        if step.total > 0:
            run.append(step)
        else:
            run = []
        # Within rounding: three windows of 0.3 reach h = 0.9 (0.30000000000000004 + …).
        if step.total >= h * (1 - 1e-12):
            how: Literal["cusum", "capped_cusum"] = "cusum" if math.isinf(cap) else "capped_cusum"
            return Firing(how, step.window, statistic=step.total, steps=run)
    return None


def cusum(
    windows: Sequence[CellWindow], op: Op, threshold: float, min_effect: float, h: float
) -> Firing | None:
    """The CUSUM without a cap: a window may reach `h` on its own."""
    return capped_cusum(windows, op, threshold, min_effect, h, math.inf)


def critical(
    windows: Sequence[CellWindow], op: Op, line: float, confidence: Confidence
) -> Firing | None:
    for window in windows:
        bound = one_sided_bound(window.num, window.den, op, confidence)
        if bound is not None and is_breach(bound, op, line):
            return Firing("critical", window.window, statistic=bound)
    return None


def should_rollback(
    windows: Sequence[CellWindow],
    history: Sequence[Verdict],
    *,
    op: Op,
    threshold: float,
    confidence: Confidence,
    detector: Detector = DEFAULT_DETECTOR,
    consecutive_windows: int = 3,
    max_span_windows: int = 36,
    min_effect: float = DEFAULT_MIN_EFFECT,
    h: float = DEFAULT_H,
    cap: float = DEFAULT_CAP,
    critical_threshold: float | None = None,
) -> Firing | None:
    """Whether the rule fires in this cell, from its closed windows and their verdicts.

    The earliest firing wins; the critical tripwire is checked beside either detector."""
    found = []
    if critical_threshold is not None:
        found.append(critical(windows, op, critical_threshold, confidence))
    if detector == "consecutive":
        found.append(consecutive(history, consecutive_windows, max_span_windows))
    elif detector == "cusum":
        found.append(cusum(windows, op, threshold, min_effect, h))
    else:
        found.append(capped_cusum(windows, op, threshold, min_effect, h, cap))
    fired = [f for f in found if f is not None]
    return min(fired, key=lambda f: f.at_window) if fired else None
