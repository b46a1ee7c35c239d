"""Alert rules on crafted window summaries (pure)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from controlplane.alerts import rules
from controlplane.alerts.rules import WindowSummary
from controlplane.catalog.schemas import AlertsConfig

T0 = datetime(2026, 11, 30, tzinfo=UTC)
CONFIG = AlertsConfig(baseline_windows=4, silence_windows=3)


def w(
    k: int,
    n: int = 200,
    pairs: int = 200,
    conflicts: int = 8,
    edge: int = 0,
    p95: float | None = 400.0,
) -> WindowSummary:
    return WindowSummary(T0 + timedelta(minutes=5 * k), n, pairs, conflicts, edge, p95)


HISTORY = [w(k) for k in range(4)]


def test_conflict_jump_needs_the_lower_bound_over_the_line_and_clears_below_it() -> None:
    # baseline 32/800 = 4%; line 8%. 40/200 = 20% is clearly over it → fires.
    fired = rules.conflict_jump(w(4, conflicts=40), HISTORY, CONFIG)
    assert fired.firing is True and fired.value == 0.2 and fired.baseline == 0.04
    assert "20.0%" in fired.message and "4.0%" in fired.message
    # 18/200 = 9% is over the line but not clearly: hold the current state.
    assert rules.conflict_jump(w(4, conflicts=18), HISTORY, CONFIG).firing is None
    # Below the line: clears.
    assert rules.conflict_jump(w(4, conflicts=10), HISTORY, CONFIG).firing is False
    # A handful of pairs cannot fire it, however bad.
    assert rules.conflict_jump(w(4, n=2, pairs=2, conflicts=2), HISTORY, CONFIG).firing is False


def test_conflict_jump_pools_the_baseline_windows_by_their_pairs() -> None:
    # Four windows of 10 pairs, one conflict among them: the median of their rates is 0,
    # the pooled rate 1/40 = 2.5%, the line 5%.
    few = [w(k, n=10, pairs=10, conflicts=1 if k == 2 else 0) for k in range(4)]
    same_rate = rules.conflict_jump(w(4, n=100, pairs=100, conflicts=3), few, CONFIG)
    assert same_rate.firing is False and same_rate.baseline == 1 / 40
    assert "(1/40 pairs over the last 4 windows)" in same_rate.message
    # 3/10 is over the line, but 40 baseline pairs are too few to call it a jump: the
    # window's share of the 4 conflicts at the line would be 20/(20+40) = 1/3, and
    # P(3 or more of 4) = 4·(1/3)³·(2/3) + (1/3)⁴ = 9/81 ≈ 0.11, not below 0.025.
    assert rules.conflict_jump(w(4, n=10, pairs=10, conflicts=3), few, CONFIG).firing is None
    # After 400 clean pairs it is: a share of 20/420, P(all 3 of 3) = (1/21)³ ≈ 0.0001.
    clean = [w(k, n=100, pairs=100, conflicts=0) for k in range(4)]
    jumped = rules.conflict_jump(w(4, n=10, pairs=10, conflicts=3), clean, CONFIG)
    assert jumped.firing is True and jumped.baseline == 0.0


def test_the_jump_p_value_is_the_binomial_tail_of_the_windows_share() -> None:
    for conflicts, pairs, base_conflicts, base_pairs, ratio in [
        (3, 10, 1, 40, 2.0), (18, 200, 32, 800, 2.0), (40, 200, 32, 800, 2.0),
        (5, 50, 0, 300, 1.5), (0, 10, 4, 40, 2.0),
    ]:  # fmt: skip
        n, share = conflicts + base_conflicts, ratio * pairs / (ratio * pairs + base_pairs)
        tail = sum(
            math.comb(n, i) * share**i * (1 - share) ** (n - i) for i in range(conflicts, n + 1)
        )
        got = rules.jump_p_value(conflicts, pairs, base_conflicts, base_pairs, ratio)
        assert got == pytest.approx(tail, rel=1e-9)
    assert rules.jump_p_value(3, 10, 1, 40, 2.0) == pytest.approx(9 / 81)


def test_conflict_jump_without_a_baseline_or_pairs_says_nothing() -> None:
    assert rules.conflict_jump(w(4, conflicts=100), HISTORY[:2], CONFIG).firing is None
    assert rules.conflict_jump(w(4, pairs=0, conflicts=0), HISTORY, CONFIG).firing is None


def test_edge_share_jump_is_an_absolute_change_either_way() -> None:
    base = [w(k, edge=100) for k in range(4)]  # 50%
    assert rules.edge_share_jump(w(4, edge=150), base, CONFIG).firing is True  # 75%
    assert rules.edge_share_jump(w(4, edge=50), base, CONFIG).firing is True  # 25%
    assert rules.edge_share_jump(w(4, edge=120), base, CONFIG).firing is False  # 60%


def test_the_input_shift_alert_opens_at_its_line_on_the_span_index() -> None:
    shifted = rules.LengthShift(0.14, 400, 7200, 600.0, 200.0, "the offload grade of 2026-12-01")
    found = rules.input_shift(shifted, CONFIG, 200)
    assert found.firing is True and (found.value, found.baseline) == (0.14, 0.1)
    for part in ("last 2h (400 results)", "index 0.14 against the offload grade of 2026-12-01",
                 "median about 600 tokens now, about 200 then", "the alert opens at 0.1"):  # fmt: skip
        assert part in found.message, found.message
    assert rules.input_shift(rules.LengthShift(0.09, 400, 7200), CONFIG, 200).firing is False
    # Too few results, or no baseline: no evidence either way (an open alert stays).
    assert rules.input_shift(rules.LengthShift(0.9, 199, 7200), CONFIG, 200).firing is None
    assert rules.input_shift(rules.LengthShift(None, 400, 7200), CONFIG, 200).firing is None


def test_no_traffic_needs_silence_windows_consecutive_empty_windows_in_a_live_stage() -> None:
    quiet = [w(0), w(1, n=0, pairs=0, conflicts=0), w(2, n=0, pairs=0, conflicts=0)]
    now = w(3, n=0, pairs=0, conflicts=0)
    # In its stage since long before these windows: no grace in the way.
    since = {"stage_changed_at": T0 - timedelta(days=1)}
    found = rules.no_traffic(now, quiet, CONFIG, "shadow", 300, **since)
    assert found.firing is True and "No results for 3 windows (15 min)" in found.message
    assert rules.no_traffic(now, quiet, CONFIG, "cloud", 300, **since).firing is False
    assert rules.no_traffic(now, quiet[-1:], CONFIG, "canary", 300, **since).firing is None
    # A gap in the windows is not evidence of silence.
    gap = [w(0), w(1, n=0, pairs=0, conflicts=0), w(5, n=0, pairs=0, conflicts=0)]
    silent_6 = w(6, n=0, pairs=0, conflicts=0)
    assert rules.no_traffic(silent_6, gap, CONFIG, "full", 300, **since).firing is None
    assert rules.no_traffic(w(3), quiet, CONFIG, "shadow", 300, **since).firing is False


def test_no_traffic_counts_only_windows_after_the_grace_of_the_stages_flag() -> None:
    # Five-minute windows, w(k) from T0 + 5k min, none with a result: the task was in cloud
    # (no traffic expected), then its flag took canary at T0 + 4 min 49 s. The grace: 11 s
    # (the client's 10 s poll interval + 10% jitter) + 300 s (a window) = T0 + 10 min 0 s.
    assert rules.FLAG_POLL_SECONDS == 10 * 1.1
    empty = [w(k, n=0, pairs=0, conflicts=0) for k in range(-6, 6)]

    def firing(k: int, changed_at: datetime | None) -> bool | None:
        current, history = empty[k + 6], empty[: k + 6]
        return rules.no_traffic(
            current, history, CONFIG, "canary", 300, stage_changed_at=changed_at
        ).firing

    changed = T0 + timedelta(minutes=4, seconds=49)
    # The windows before the change are no evidence (the rehearsal's finding: the change's
    # own window, w(0), opened the alert); nor is w(1), begun 1 min 11 s after the change.
    # w(2) starts as the grace ends and counts: the third window counted, w(4), opens it.
    assert [firing(k, changed) for k in range(5)] == [None, None, None, None, True]
    # A second later, w(2) starts within the grace: the count starts at w(3).
    later = changed + timedelta(seconds=1)
    assert [firing(k, later) for k in range(2, 6)] == [None, None, None, True]
    # With no known change there is no grace: three empty windows are enough.
    assert firing(0, None) is True
    # Results in the grace (routers that had the flag early) do not shorten it: the count
    # starts after the last window with results and never inside the grace.
    answered = [*empty[:6], w(0, n=4, pairs=4, conflicts=0), *empty[7:]]
    by_window = [
        rules.no_traffic(
            answered[k + 6], answered[: k + 6], CONFIG, "canary", 300, stage_changed_at=changed
        )
        for k in range(5)
    ]
    assert [f.firing for f in by_window] == [False, None, None, None, True]
    assert by_window[4].baseline == 4  # the median of the earlier windows with results
