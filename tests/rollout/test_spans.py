"""rollout.spans: net_savings against hand computations, the t quantiles against the
table, the net_savings law by hypothesis, and input_shift on stationary traffic, a step, a
burst that reverts and a span of fewer than four windows. Pure: no database."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.alerts.rules import LengthShift, input_shift
from controlplane.catalog.schemas import ResolvedRule, TaskConfig, parse_config
from controlplane.metrics import lengths
from controlplane.metrics.shift import Baseline, SpanWindow
from controlplane.rollout.spans import (
    SpanVerdict,
    judge_input_shift,
    judge_net_savings,
    quarters,
    run_start,
    span_firing,
    span_verdicts,
    t_quantile,
)

WINDOW = 300
NET_SAVINGS = {"metric": "net_savings", "op": ">=", "threshold": 0}
# t_{0.975, df} from the table: the 95% intervals of two, three and four windows.
T_1, T_2, T_3 = 12.706, 4.303, 3.182


def config(**overrides: Any) -> TaskConfig:
    return parse_config({"task": "spans", "comparator": {"kind": "exact"}, **overrides})


def rule_of(found: TaskConfig, metric: str) -> ResolvedRule:
    return next(r for r in found.rollback.resolved_rules() if r.metric == metric)


def net_rule(**fields: Any) -> ResolvedRule:
    return rule_of(config(rollback={"rules": [{**NET_SAVINGS, **fields}]}), "net_savings")


# Three windows: (n, edge, cloud, baseline) → savings 2.40, 0.75, 3.30; then a fourth
# with savings 2.20.
W0 = SpanWindow(0, 100, 0.10, 0.50, 3.00)
W1 = SpanWindow(1, 50, 0.05, 0.40, 1.20)
W2 = SpanWindow(2, 150, 0.20, 1.00, 4.50)
W3 = SpanWindow(3, 100, 0.10, 0.60, 2.90)


def judge(
    windows: Sequence[SpanWindow], rule: ResolvedRule, at: int, fixed: float, origin: int = 0
) -> SpanVerdict:
    return judge_net_savings(
        windows, rule, at=at, origin=origin, window_seconds=WINDOW, fixed_cost_per_day=fixed
    )


def test_net_savings_of_three_windows_matches_a_hand_computation() -> None:
    rule = net_rule(span="15m", min_samples=10)
    # 288 a day is 1.00 per window of 300 s: 288 × 3 × 300 / 86400 = 3.00 over the span.
    found = judge([W0, W1, W2], rule, at=2, fixed=288)
    terms = found.evidence
    n = 100 + 50 + 150
    edge, cloud, base = 0.10 + 0.05 + 0.20, 0.50 + 0.40 + 1.00, 3.00 + 1.20 + 4.50
    savings = base - edge - cloud  # 8.70 − 2.25 = 6.45
    fixed = 288 * 3 * 300 / 86400
    net = savings - fixed  # 3.45
    mu = savings / n  # 0.0215 a result
    # Each window's savings less μ × its results: 0.25, −0.325, 0.075 (they sum to 0).
    residuals = [2.40 - mu * 100, 0.75 - mu * 50, 3.30 - mu * 150]
    assert residuals == pytest.approx([0.25, -0.325, 0.075])
    spread = sum(r * r for r in residuals) * 3 / 2  # 0.17375 × 3/2 = 0.260625
    half = T_2 * math.sqrt(spread)  # 4.303 × 0.51051 = 2.1967
    assert (terms["results"], terms["windows"], terms["span_seconds"]) == (300, 3, 900)
    assert terms["edge_cost"] == pytest.approx(edge)
    assert terms["cloud_cost"] == pytest.approx(cloud)
    assert terms["paid"] == pytest.approx(edge + cloud)
    assert terms["baseline_cost"] == pytest.approx(base)
    assert terms["savings"] == pytest.approx(6.45)
    assert fixed == 3.0 and terms["fixed_cost"] == pytest.approx(fixed)
    assert terms["net_savings"] == pytest.approx(net)
    assert net == pytest.approx(3.45)
    assert terms["interval"] == 0.95
    assert terms["low"] == pytest.approx(net - half, rel=1e-3)
    assert terms["high"] == pytest.approx(net + half, rel=1e-3)
    assert terms["per_1k"] == pytest.approx(
        {
            "edge_cost": edge / n * 1000,
            "cloud_cost": cloud / n * 1000,
            "baseline_cost": base / n * 1000,
            "savings": 21.5,
            "fixed_cost": 10.0,
            "net_savings": 11.5,
        }
    )
    assert (found.verdict, found.first_window, found.at_window) == ("ok", 0, 2)
    assert found.statistic == terms["high"]
    assert found.threshold == 0


def test_fixed_costs_over_the_savings_breach_and_a_lower_threshold_does_not() -> None:
    # 1152 a day is 4.00 a window: net 6.45 − 12 = −5.55, high −5.55 + 2.1967 = −3.353.
    spread = (0.25**2 + 0.325**2 + 0.075**2) * 3 / 2
    high = 6.45 - 1152 * 3 * 300 / 86400 + T_2 * math.sqrt(spread)
    found = judge([W0, W1, W2], net_rule(span="15m", min_samples=10), at=2, fixed=1152)
    assert found.verdict == "breach"
    assert found.statistic == pytest.approx(high, rel=1e-3)
    assert high == pytest.approx(-3.353, abs=1e-3)
    lower = judge(
        [W0, W1, W2], net_rule(span="15m", min_samples=10, threshold=-4), at=2, fixed=1152
    )
    assert lower.verdict == "ok"
    # 1000 a day over three windows is 10.4167: net −3.9667, so the 95% bound is below 0
    # (−3.9667 + 2.1967) and the 99% one, t_{0.995, 2} = 9.925, above it.
    net = 6.45 - 1000 * 3 * 300 / 86400
    rule = net_rule(span="15m", min_samples=10)
    assert judge([W0, W1, W2], rule, at=2, fixed=1000).verdict == "breach"
    wider = judge(
        [W0, W1, W2], net_rule(span="15m", min_samples=10, confidence=0.99), at=2, fixed=1000
    )
    assert wider.evidence["interval"] == 0.99
    assert wider.statistic == pytest.approx(net + 9.925 * math.sqrt(spread), rel=1e-3)
    assert wider.verdict == "ok"


def test_two_and_four_windows_read_t_with_one_and_three_degrees_of_freedom() -> None:
    rule = net_rule(span="20m", min_samples=10)
    # Two windows: savings 3.15 of 150 results (μ 0.021), fixed 2.00; residuals ±0.30.
    two = judge([W0, W1, W2, W3], rule, at=1, fixed=288).evidence
    half = T_1 * math.sqrt((0.30**2 + 0.30**2) * 2 / 1)
    assert (two["results"], two["windows"]) == (150, 2)
    assert two["net_savings"] == pytest.approx(3.15 - 2.0)
    assert two["high"] == pytest.approx(1.15 + half, rel=1e-3)
    assert two["low"] == pytest.approx(1.15 - half, rel=1e-3)
    # Four windows: savings 8.65 of 400 (μ 0.021625), fixed 4.00, net 4.65.
    mu = 8.65 / 400
    residuals = [2.40 - 100 * mu, 0.75 - 50 * mu, 3.30 - 150 * mu, 2.20 - 100 * mu]
    half = T_3 * math.sqrt(sum(r * r for r in residuals) * 4 / 3)
    four = judge([W0, W1, W2, W3], rule, at=3, fixed=288).evidence
    assert four["net_savings"] == pytest.approx(4.65)
    assert four["high"] == pytest.approx(4.65 + half, rel=1e-3)
    assert four["low"] == pytest.approx(4.65 - half, rel=1e-3)


def test_a_window_without_results_bears_its_fixed_share_but_is_no_cluster() -> None:
    rule = net_rule(span="15m", min_samples=10)
    empty = SpanWindow(1, 0, 0.0, 0.0, 0.0)
    for windows in ([W0, empty, W2], [W0, W2]):
        terms = judge(windows, rule, at=2, fixed=288).evidence
        # Savings 5.70 of 250 (μ 0.0228), three windows' fixed share, two clusters.
        mu = 5.70 / 250
        residuals = [2.40 - 100 * mu, 3.30 - 150 * mu]
        half = T_1 * math.sqrt(sum(r * r for r in residuals) * 2)
        assert (terms["windows"], terms["fixed_cost"]) == (2, 3.0)
        assert terms["net_savings"] == pytest.approx(5.70 - 3.0)
        assert terms["high"] == pytest.approx(2.70 + half, rel=1e-3)


def test_the_span_starts_at_the_stage_and_slides() -> None:
    rule = net_rule(span="10m", min_samples=10)
    # The stage began at window 1: the span ending at 1 is that window alone.
    young = judge([W0, W1, W2], rule, at=1, fixed=288, origin=1)
    assert (young.first_window, young.evidence["results"], young.evidence["fixed_cost"]) == (
        1,
        50,
        1.0,
    )
    # Two windows of 300 s: the span ending at 3 holds windows 2 and 3.
    slid = judge([W0, W1, W2, W3], rule, at=3, fixed=288)
    assert (slid.first_window, slid.evidence["results"]) == (2, 250)
    assert slid.evidence["savings"] == pytest.approx(3.30 + 2.20)


def test_a_stage_younger_than_its_span_is_never_judged_on_part_of_a_day() -> None:
    """A canary started in the evening has seen only its quietest hours: with fixed costs
    spread over time and savings following the traffic, it would show a loss by morning.
    Until the stage holds a whole span, net_savings is insufficient, however it looks."""
    rule = net_rule(span="15m", min_samples=10)
    losing = [SpanWindow(i, 100, 0.10, 5.00, 2.10) for i in range(10, 13)]
    young = [judge(losing, rule, at=at, fixed=288, origin=10) for at in (10, 11)]
    assert [v.verdict for v in young] == ["insufficient", "insufficient"]
    assert young[1].evidence["net_savings"] == pytest.approx(-8.0)
    assert judge(losing, rule, at=12, fixed=288, origin=10).verdict == "breach"


def test_insufficient_below_min_samples_or_with_one_window_of_results() -> None:
    few = judge([W0, W1, W2], net_rule(span="15m", min_samples=400), at=2, fixed=288)
    assert few.verdict == "insufficient"
    assert few.statistic is None
    assert "300 results in the span, fewer than min_samples 400" in few.why
    # A whole span in the stage, but one window of it with results: no interval yet.
    lone = [W0, SpanWindow(1, 0, 0.0, 0.0, 0.0), SpanWindow(2, 0, 0.0, 0.0, 0.0)]
    alone = judge(lone, net_rule(span="15m", min_samples=10), at=2, fixed=288)
    assert alone.verdict == "insufficient"
    assert alone.evidence["high"] is None
    assert "fewer than two windows with results" in alone.why
    # The default min_samples is the policy's, 200.
    assert net_rule().min_samples == 200
    assert judge([W0, W1], net_rule(), at=1, fixed=288).verdict == "insufficient"


def test_itemised_fixed_costs_are_prorated_over_the_span() -> None:
    found = config(
        fixed_costs={"routing": 10, "gpu": 25, "ops": 5},
        rollback={"rules": [{**NET_SAVINGS, "span": "15m", "min_samples": 10}]},
    )
    assert found.fixed_cost_per_day == 40
    verdict = judge_net_savings(
        [W0, W1, W2],
        rule_of(found, "net_savings"),
        at=2,
        origin=0,
        window_seconds=WINDOW,
        fixed_cost_per_day=found.fixed_cost_per_day,
        fixed_costs=found.fixed_costs,
    )
    # Three windows of 300 s are 900 / 86400 = 1/96 of a day.
    share = 900 / 86400
    assert verdict.evidence["fixed_costs"] == pytest.approx(
        {"routing": 10 * share, "gpu": 25 * share, "ops": 5 * share}, abs=1e-6
    )
    assert verdict.evidence["fixed_cost"] == pytest.approx(40 * share, abs=1e-6)
    assert verdict.evidence["net_savings"] == pytest.approx(6.45 - 40 * share, abs=1e-6)


def test_the_rule_fires_at_its_first_breach() -> None:
    rule = net_rule(span="15m", min_samples=10)
    # Savings per window 2.40, 0.75, 3.30, 2.20, then three windows that lose 3.00 each.
    losing = [SpanWindow(i, 100, 0.10, 5.00, 2.10) for i in range(4, 7)]
    windows = [W0, W1, W2, W3, *losing]
    found = span_verdicts(
        windows, rule, judge_from=0, origin=0, window_seconds=WINDOW, fixed_cost_per_day=288
    )
    assert [v.at_window for v in found] == list(range(7))
    # Span of three windows, fixed 1.00 each. At 4: windows 2–4 save 3.30 + 2.20 − 3.00 =
    # 2.50, net −0.50, but μ = 2.50/350 leaves residuals 2.229, 1.486, −3.714: high
    # −0.50 + 4.303 × √(20.97 × 3/2) = 23.6. At 6: windows 4–6 each lose 3.00, residuals 0,
    # so high = net = −9.00 − 3.00 = −12.
    mu = 2.50 / 350
    spread = sum(r * r for r in (3.30 - 150 * mu, 2.20 - 100 * mu, -3.00 - 100 * mu)) * 1.5
    assert found[4].statistic == pytest.approx(-0.50 + T_2 * math.sqrt(spread), rel=1e-3)
    assert found[6].evidence["net_savings"] == pytest.approx(-12.0)
    assert found[6].statistic == pytest.approx(-12.0, abs=1e-6)
    # At 0 and 1 the stage holds less than one whole span (three windows) yet.
    assert [v.verdict for v in found] == ["insufficient"] * 2 + ["ok"] * 4 + ["breach"]
    assert "less than one whole span" in found[1].why
    fired = span_firing(rule, found)
    assert fired is not None
    assert (fired.how, fired.at_window, fired.first_window) == ("net_savings", 6, 4)
    assert run_start(found) == 6


def test_a_run_of_breaches_starts_after_the_last_ok() -> None:
    def verdict(at: int, kind: Any) -> SpanVerdict:
        return SpanVerdict(at, at, kind, None, 0.0)

    kinds = ["breach", "ok", "breach", "insufficient", "breach"]
    assert run_start([verdict(i, k) for i, k in enumerate(kinds)]) == 2
    assert run_start([verdict(0, "breach"), verdict(1, "ok")]) is None
    assert run_start([]) is None


# Two-sided quantiles t_{(1 + level)/2, df} from the table.
T_TABLE = {
    0.95: {
        1: 12.7062,
        2: 4.3027,
        3: 3.1824,
        4: 2.7764,
        5: 2.5706,
        10: 2.2281,
        30: 2.0423,
        100: 1.9840,
    },
    0.90: {
        1: 6.3138,
        2: 2.9200,
        3: 2.3534,
        4: 2.1318,
        5: 2.0150,
        10: 1.8125,
        30: 1.6973,
        100: 1.6602,
    },
    0.99: {
        1: 63.657,
        2: 9.9248,
        3: 5.8409,
        4: 4.6041,
        5: 4.0321,
        10: 3.1693,
        30: 2.7500,
        100: 2.6259,
    },
}


@pytest.mark.parametrize(
    ("level", "df", "exact"),
    [(level, df, t) for level, row in T_TABLE.items() for df, t in row.items()],
)
def test_t_quantile_matches_the_table(level: float, df: int, exact: float) -> None:
    assert t_quantile(level, df) == pytest.approx(exact, rel=1e-3)


def test_t_quantile_without_degrees_of_freedom_is_infinite() -> None:
    assert t_quantile(0.95, 0) == math.inf


@st.composite
def profitable_streams(draw: st.DrawFn) -> tuple[list[SpanWindow], float, str]:
    """Contiguous windows each of which saves more than its share of the fixed costs."""
    fixed = draw(st.floats(0, 2000))
    span = draw(st.sampled_from(["15m", "1h", "24h"]))
    share = fixed * WINDOW / 86400
    windows = []
    for i in range(draw(st.integers(2, 30))):
        n = draw(st.integers(1, 300))
        edge = draw(st.floats(0, 5))
        cloud = draw(st.floats(0, 50))
        margin = draw(st.floats(0.001, 20))
        windows.append(SpanWindow(i, n, edge, cloud, edge + cloud + share + margin))
    return windows, fixed, span


@settings(max_examples=60, deadline=None)
@given(profitable_streams())
def test_net_savings_never_fires_while_every_window_pays_its_fixed_share(
    stream: tuple[list[SpanWindow], float, str],
) -> None:
    windows, fixed, span = stream
    found = config(
        rollback={
            "rules": [
                {"metric": "input_shift", "op": "<=", "threshold": 0.25},
                {**NET_SAVINGS, "span": span},
            ]
        }
    )
    rule = rule_of(found, "net_savings")
    assert (rule.threshold, rule.confidence, rule.min_samples) == (0, 0.95, 200)
    verdicts = span_verdicts(
        windows, rule, judge_from=0, origin=0, window_seconds=WINDOW, fixed_cost_per_day=fixed
    )
    assert len(verdicts) == len(windows)
    assert all(v.verdict != "breach" for v in verdicts)
    assert span_firing(rule, verdicts) is None


# input_shift: 100 results a window of 300 s, lognormal lengths around 400 tokens; the
# default rule (PSI above 0.25 over 2 h, min_samples 200), so a span of 24 windows.
PER_WINDOW = 100
SPAN = 24


def length_windows(rng: numpy.random.Generator, factors: Sequence[float]) -> list[SpanWindow]:
    """One window per factor: PER_WINDOW input lengths, the usual ones times the factor."""
    draws = rng.lognormal(math.log(400), 0.8, (len(factors), PER_WINDOW))
    return [
        SpanWindow(i, PER_WINDOW, 0.0, 0.0, 0.0, tuple(lengths.histogram((row * f).astype(int))), 0)
        for i, (row, f) in enumerate(zip(draws, factors, strict=True))
    ]


@pytest.fixture(scope="module")
def week() -> Baseline:
    """A week of windows of the same traffic as the baseline."""
    rng = numpy.random.default_rng(7)
    draws = rng.lognormal(math.log(400), 0.8, 2016 * PER_WINDOW).astype(int)
    return Baseline(tuple(lengths.histogram(draws)), 0, "a week of the same traffic")


def shift_rule() -> ResolvedRule:
    rule = rule_of(config(), "input_shift")
    assert (rule.threshold, rule.span_seconds, rule.min_samples) == (0.25, 7200, 200)
    return rule


def shift_verdicts(windows: Sequence[SpanWindow], baseline: Baseline | None) -> list[SpanVerdict]:
    return span_verdicts(
        windows, shift_rule(), judge_from=0, origin=0, window_seconds=WINDOW, baseline=baseline
    )


def test_stationary_lengths_never_fire_over_a_thousand_closes(week: Baseline) -> None:
    windows = length_windows(numpy.random.default_rng(11), [1.0] * (1000 + SPAN - 1))
    found = shift_verdicts(windows, week)
    # Until the stage holds one whole span: insufficient, whatever the index (the first
    # window for its 100 results, below min_samples).
    assert {v.verdict for v in found[: SPAN - 1]} == {"insufficient"}
    assert all("less than one whole span" in v.why for v in found[1 : SPAN - 1])
    judged = found[SPAN - 1 :]
    assert len(judged) == 1000
    assert {v.verdict for v in judged} == {"ok"}
    assert max(v.statistic or 0 for v in judged) < 0.25
    assert span_firing(shift_rule(), found) is None


def test_a_threefold_step_fires_within_its_span_and_not_before(week: Baseline) -> None:
    step = 48
    windows = length_windows(numpy.random.default_rng(12), [1.0] * step + [3.0] * 60)
    found = shift_verdicts(windows, week)
    assert all(v.verdict != "breach" for v in found if v.at_window < step)
    fired = span_firing(shift_rule(), found)
    assert fired is not None and fired.how == "input_shift"
    # Caught within the span: at most 24 window closes from the first long one.
    assert step <= fired.at_window <= step + SPAN - 1
    assert fired.statistic is not None and fired.statistic > 0.25
    assert all(q["psi"] > 0.25 for q in fired.evidence["quarters"])
    assert fired.evidence["baseline_source"] == "a week of the same traffic"


def test_an_hour_of_long_inputs_that_reverts_never_fires_but_opens_the_alert(
    week: Baseline,
) -> None:
    windows = length_windows(numpy.random.default_rng(13), [1.0] * 48 + [3.0] * 12 + [1.0] * 60)
    found = shift_verdicts(windows, week)
    assert span_firing(shift_rule(), found) is None
    peak = max(found, key=lambda v: v.statistic or 0)
    alerts = config().alerts
    assert alerts.input_shift == 0.1
    assert peak.statistic is not None and peak.statistic >= alerts.input_shift
    shift = LengthShift(peak.statistic, peak.evidence["results"], 7200)
    assert input_shift(shift, alerts, shift_rule().min_samples).firing is True
    # Long after the burst the index is back under the alert line.
    assert (found[-1].statistic or 0) < alerts.input_shift


def test_quarters_split_the_span_evenly() -> None:
    assert quarters(0, 23) == [(0, 5), (6, 11), (12, 17), (18, 23)]
    assert quarters(100, 123) == [(100, 105), (106, 111), (112, 117), (118, 123)]
    for first, at in ((0, 9), (5, 18), (0, 3), (7, 1000)):
        parts = quarters(first, at)
        sizes = [hi - lo + 1 for lo, hi in parts]
        assert len(parts) == 4
        assert parts[0][0] == first and parts[-1][1] == at
        assert all(b[0] == a[1] + 1 for a, b in zip(parts, parts[1:], strict=False))
        assert max(sizes) - min(sizes) <= 1
    # Fewer than four windows: one run each, none empty.
    assert quarters(0, 1) == [(0, 0), (1, 1)]
    assert quarters(4, 6) == [(4, 4), (5, 5), (6, 6)]
    assert quarters(3, 3) == [(3, 3)]


def test_a_span_of_two_windows_fires_on_a_step(week: Baseline) -> None:
    # Windows of an hour, the default span of 2 h: two windows, so two runs of one window.
    hourly = config(window_seconds=3600)
    rule = rule_of(hourly, "input_shift")
    windows = length_windows(numpy.random.default_rng(14), [1.0] * 4 + [3.0] * 3)
    found = span_verdicts(windows, rule, judge_from=0, origin=0, window_seconds=3600, baseline=week)
    fired = span_firing(rule, found)
    assert fired is not None
    assert fired.at_window == 5
    assert len(fired.evidence["quarters"]) == 2


def test_input_shift_is_insufficient_without_a_baseline_or_whole_span(week: Baseline) -> None:
    windows = length_windows(numpy.random.default_rng(15), [3.0] * 30)
    blind = shift_verdicts(windows, None)
    assert {v.verdict for v in blind} == {"insufficient"}
    assert all("no baseline" in v.why for v in blind)
    # One window of 100 results: below min_samples 200 whatever the index.
    verdict = judge_input_shift(windows, shift_rule(), week, at=0, origin=0, window_seconds=WINDOW)
    assert verdict.verdict == "insufficient"
    assert verdict.statistic is not None and verdict.statistic > 0.25
    assert "100 results in the span, fewer than min_samples 200" in verdict.why
    # A stage that began at window 10 holds a whole span first at window 33.
    young = span_verdicts(
        windows, shift_rule(), judge_from=10, origin=10, window_seconds=WINDOW, baseline=week
    )
    assert [v.at_window for v in young] == list(range(10, 30))
    assert {v.verdict for v in young} == {"insufficient"}
    assert "fewer than min_samples" in young[0].why
    assert all("less than one whole span" in v.why for v in young[1:])
