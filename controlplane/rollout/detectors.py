"""`should_rollback` (docs/evidence.md, "Rollouts"): a pure function of one rule's verdict
history in one cell.

- `consecutive` (default): `consecutive_windows` consecutive conclusive breaches fire;
  `ok` resets the run, `insufficient` neither counts nor resets, and a run spanning more
  than `max_span_windows` windows lapses (the breach that overstretches it starts anew).
- `cusum`: a Bernoulli CUSUM over the cell's counts, from the threshold (in control) to
  the threshold moved by `min_effect` toward the bad side (out of control), fires when
  its sum reaches `h`.
- `critical`: any single window whose bound is beyond the optional critical threshold.

The history is scanned from the start of the current stage; the first point where the
rule fires is returned, so an evaluation that runs late still sees it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from controlplane.catalog.schemas import DEFAULT_H, DEFAULT_MIN_EFFECT, Detector
from controlplane.rollout.verdicts import (
    CellWindow,
    Confidence,
    Op,
    Verdict,
    is_breach,
    one_sided_bound,
)


@dataclass(frozen=True, slots=True)
class Firing:
    how: Literal["consecutive", "cusum", "critical"]
    at_window: int
    # The verdicts of the breaching run (consecutive), or the window(s) that tripped.
    verdicts: list[Verdict] = field(default_factory=list)
    statistic: float | None = None


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


def cusum(
    windows: Sequence[CellWindow], op: Op, threshold: float, min_effect: float, h: float
) -> Firing | None:
    """Bernoulli CUSUM of the log-likelihood ratio 'moved by min_effect' over 'at threshold'."""
    p0 = min(max(threshold, 1e-6), 1 - 1e-6)
    p1 = threshold + min_effect if op == "<=" else threshold - min_effect
    p1 = min(max(p1, 1e-6), 1 - 1e-6)
    hit, miss = math.log(p1 / p0), math.log((1 - p1) / (1 - p0))
    total = 0.0
    for window in windows:
        total = max(0.0, total + window.num * hit + (window.den - window.num) * miss)
        if total >= h:
            return Firing("cusum", window.window, statistic=total)
    return None


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
    detector: Detector = "consecutive",
    consecutive_windows: int = 3,
    max_span_windows: int = 36,
    min_effect: float = DEFAULT_MIN_EFFECT,
    h: float = DEFAULT_H,
    critical_threshold: float | None = None,
) -> Firing | None:
    """Whether the rule fires in this cell, from its closed windows and their verdicts.

    The earliest firing wins; the critical tripwire is checked beside either detector."""
    found = []
    if critical_threshold is not None:
        found.append(critical(windows, op, critical_threshold, confidence))
    if detector == "consecutive":
        found.append(consecutive(history, consecutive_windows, max_span_windows))
    else:
        found.append(cusum(windows, op, threshold, min_effect, h))
    fired = [f for f in found if f is not None]
    return min(fired, key=lambda f: f.at_window) if fired else None
