"""When each alert fires and clears, judged on a window's `all` row against its history. Pure.

`conflict_jump`, `edge_share_jump`, `input_shift` and `no_traffic` (`srm` is in
`controlplane.alerts.srm`); docs/evidence.md ("Windows, metrics and alerts") gives each
condition. Without a baseline or data the finding is `None` (no evidence either way) and
an open alert stays as it is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from controlplane.catalog.schemas import AlertsConfig
from controlplane.client.flags import POLL_INTERVAL, POLL_JITTER
from controlplane.metrics.stats import median
from controlplane.timeutil import duration

LIVE_STAGES = ("shadow", "canary", "full")
MIN_CONFLICTS = 3
# conflict_jump opens when a rate at its line would hold as many conflicts less often than
# this: one side of a 95% interval, as the lower bound it read before.
JUMP_P_VALUE = 0.025
# The longest a router on the Python client's defaults takes to fetch a new flag: its poll
# interval plus the top of its jitter, 11 s (a router on the flag stream hears in a second).
FLAG_POLL_SECONDS = POLL_INTERVAL * (1 + POLL_JITTER)


@dataclass(frozen=True, slots=True)
class WindowSummary:
    """What alerts read of a closed window: its `all` row."""

    window_start: datetime
    n_results: int
    n_pairs: int
    n_conflict: int
    n_served_edge: int
    input_tokens_p95: float | None


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str
    # True: the condition holds; False: it does not; None: not enough evidence to say.
    firing: bool | None
    value: float | None = None
    baseline: float | None = None
    message: str = ""


def _pct(x: float) -> str:
    return f"{x:.1%}"


def conflict_jump(
    current: WindowSummary, history: Sequence[WindowSummary], config: AlertsConfig
) -> Finding:
    """The window's conflict rate against the pooled rate of the baseline windows (their
    conflicts over their pairs, so windows of a few pairs weigh as little as they hold)."""
    kind = "conflict_jump"
    baseline = [w for w in history[-config.baseline_windows :] if w.n_pairs]
    if not current.n_pairs or len(baseline) < min(3, config.baseline_windows):
        return Finding(kind, None)
    base_conflicts = sum(w.n_conflict for w in baseline)
    base_pairs = sum(w.n_pairs for w in baseline)
    rate = current.n_conflict / current.n_pairs
    base = base_conflicts / base_pairs
    line = config.conflict_jump * base
    if current.n_conflict < MIN_CONFLICTS or rate < line:
        firing: bool | None = False
    elif (
        jump_p_value(
            current.n_conflict, current.n_pairs, base_conflicts, base_pairs, config.conflict_jump
        )
        < JUMP_P_VALUE
    ):
        firing = True
    else:
        firing = None  # above the line but not conclusively: hold the current state
    return Finding(
        kind,
        firing,
        rate,
        base,
        f"Conflict rate {_pct(rate)} ({current.n_conflict}/{current.n_pairs} pairs) against a "
        f"baseline of {_pct(base)} ({base_conflicts}/{base_pairs} pairs over the last "
        f"{len(baseline)} windows); the alert line is {config.conflict_jump:g}× the baseline.",
    )


def jump_p_value(
    conflicts: int, pairs: int, base_conflicts: int, base_pairs: int, ratio: float
) -> float:
    """How likely a window of `pairs` pairs holds `conflicts` conflicts or more if its rate
    were only `ratio` × the baseline's: the exact conditional test of two Poisson rates
    (given the conflicts of both, the window's share of them is binomial)."""
    weight = ratio * pairs
    return _at_least(conflicts, conflicts + base_conflicts, weight / (weight + base_pairs))


def _at_least(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    if k <= 0 or p >= 1.0:
        return 1.0
    if p <= 0.0 or k > n:
        return 0.0
    log_p, log_q = math.log(p), math.log1p(-p)
    mode = (n + 1) * p
    total = 0.0
    for i in range(k, n + 1):
        term = math.exp(
            math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
            + i * log_p + (n - i) * log_q
        )  # fmt: skip
        total += term
        # Past the mode the terms only shrink: stop once they no longer count.
        if i > mode and term < total * 1e-15:
            break
    return min(1.0, total)


def edge_share_jump(
    current: WindowSummary, history: Sequence[WindowSummary], config: AlertsConfig
) -> Finding:
    kind = "edge_share_jump"
    shares = [
        w.n_served_edge / w.n_results for w in history[-config.baseline_windows :] if w.n_results
    ]
    if not current.n_results or len(shares) < min(3, config.baseline_windows):
        return Finding(kind, None)
    share = current.n_served_edge / current.n_results
    base = median(shares) or 0.0
    return Finding(
        kind,
        abs(share - base) >= config.edge_share_jump,
        share,
        base,
        f"The edge served {_pct(share)} of {current.n_results} results against a baseline of "
        f"{_pct(base)} (median of the last {len(shares)} windows); the alert moves at "
        f"{config.edge_share_jump:.0%} either way.",
    )


@dataclass(frozen=True, slots=True)
class LengthShift:
    """The input lengths of the span that ends with a window, against the task's baseline:
    their population stability index (None without a baseline or data), how many results
    the span holds, the rough medians, and where the baseline came from."""

    psi: float | None
    results: int
    span_seconds: int
    median_now: float | None = None
    median_baseline: float | None = None
    baseline_source: str = ""


def input_shift(shift: LengthShift, config: AlertsConfig, min_results: int) -> Finding:
    """Open at the alert line (`alerts.input_shift`, 0.1) on the trailing span's index; the
    `input_shift` rule rolls back only when the shift holds for its whole span."""
    kind = "input_shift"
    if shift.psi is None or shift.results < min_results:
        return Finding(kind, None)
    now = f"about {shift.median_now:,.0f}" if shift.median_now is not None else "no data"
    then = f"about {shift.median_baseline:,.0f}" if shift.median_baseline is not None else "?"
    return Finding(
        kind,
        shift.psi >= config.input_shift,
        shift.psi,
        config.input_shift,
        f"Input lengths over the last {duration(shift.span_seconds)} ({shift.results} results) have shifted: "
        f"population stability index {shift.psi:.2f} against {shift.baseline_source} "
        f"(median {now} tokens now, {then} then); the alert opens at "
        f"{config.input_shift:g}, the input_shift rule rolls back when a shift holds for "
        "its whole span.",
    )


def silence_counted_from(stage_changed_at: datetime | None, window_seconds: int) -> datetime | None:
    """The end of the grace after the flag change that put the task in its stage: routers
    on the client's defaults have had the new flag for a poll interval (FLAG_POLL_SECONDS)
    plus a window. None when the change is unknown: no grace."""
    if stage_changed_at is None:
        return None
    return stage_changed_at + timedelta(seconds=FLAG_POLL_SECONDS + window_seconds)


def no_traffic(
    current: WindowSummary,
    history: Sequence[WindowSummary],
    config: AlertsConfig,
    stage: str,
    window_seconds: int,
    *,
    stage_changed_at: datetime | None,
) -> Finding:
    """Open on `silence_windows` consecutive windows without a result, up to this one, in a
    live stage. Only windows that start once the grace after the stage's flag change is
    over count, and none before the last window with results: a task whose routers never
    send opens once its first `silence_windows` windows after the grace close empty. In the
    grace the finding is None, so an alert already open stays."""
    kind = "no_traffic"
    if stage not in LIVE_STAGES or current.n_results:
        return Finding(kind, False, float(current.n_results))
    needed = config.silence_windows
    counted_from = silence_counted_from(stage_changed_at, window_seconds)
    step = timedelta(seconds=window_seconds)
    run: list[WindowSummary] = []
    for window in [current, *reversed(history)]:
        if len(run) == needed or window.n_results:
            break
        # A window of the grace is not evidence: routers may not have the new flag yet.
        if counted_from is not None and window.window_start < counted_from:
            break
        # Only consecutive windows count: a missing window is not evidence of silence.
        if run and window.window_start != run[-1].window_start - step:
            break
        run.append(window)
    if len(run) < needed:
        return Finding(kind, None)
    earlier = [w.n_results for w in history if w.n_results]
    minutes = needed * window_seconds / 60
    return Finding(
        kind,
        True,
        0.0,
        median(earlier) if earlier else None,
        f"No results for {needed} windows ({minutes:g} min) while the task is in {stage}: "
        "its router may be down or no longer sending shadow traffic.",
    )


def findings(
    current: WindowSummary,
    history: Sequence[WindowSummary],
    config: AlertsConfig,
    *,
    stage: str,
    window_seconds: int,
    stage_changed_at: datetime | None,
    lengths: LengthShift,
    min_results: int,
) -> list[Finding]:
    """Every alert's finding for one closed window; `history` holds earlier windows, oldest
    first; `stage_changed_at` when the task's flag took its stage (the silence's grace);
    `lengths` the input lengths of the span ending with it against the baseline."""
    return [
        conflict_jump(current, history, config),
        edge_share_jump(current, history, config),
        input_shift(lengths, config, min_results),
        no_traffic(
            current, history, config, stage, window_seconds, stage_changed_at=stage_changed_at
        ),
    ]
