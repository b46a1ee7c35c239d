"""shadowplane_dashboard.task.spans: the Task page's cost and input-length sections and a span
rollback's evidence, from the plain answers of controlplane.rollout.taskview's pure
views (`cost_view`, `lengths_view`) over windows written here; every figure asserted is
computed by hand in the test."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import pytest

from controlplane.catalog.schemas import ResolvedRule, TaskConfig, input_shift_rule, parse_config
from controlplane.metrics import lengths
from controlplane.metrics.shift import Baseline, SpanWindow
from controlplane.rollout import spans as rules
from controlplane.rollout.taskview import cost_view, judging_rule, lengths_view
from shadowplane_dashboard import charts
from shadowplane_dashboard.task import spans, views
from tests.dashboard.conftest import shown
from tests.dashboard.vega import as_sent

HOUR = 3600
T0 = datetime(2026, 11, 30, 0, 0, tzinfo=UTC)
FIRST = int(T0.timestamp()) // HOUR
# Three hourly windows: (results, edge, cloud, cloud baseline); savings 3, 5 and 2.
COSTS = [(100, 1.0, 2.0, 6.0), (200, 2.0, 3.0, 10.0), (100, 1.0, 1.0, 4.0)]
# t for a 95% two-sided interval with 2 degrees of freedom, in closed form (tables: 4.303).
T_95_2 = 0.95 * math.sqrt(2 / (1 - 0.95**2))


def config(*rules_: dict[str, Any]) -> TaskConfig:
    return parse_config(
        {
            "task": "t",
            "comparator": {"kind": "exact"},
            "window_seconds": HOUR,
            "fixed_costs": {"routing": 12, "gpu": 36},
            "rollback": {"rules": list(rules_)},
        }
    )


def cost_rows() -> list[SpanWindow]:
    return [
        SpanWindow(FIRST + k, n, edge, cloud, base)
        for k, (n, edge, cloud, base) in enumerate(COSTS)
    ]


def cost_of(found: TaskConfig, *, origin: int = FIRST, stage: int | None = None) -> dict[str, Any]:
    judged = judging_rule(found, "net_savings")
    return cost_view(
        found,
        cost_rows(),
        at=FIRST + 2,
        span_seconds=judged.span_seconds if judged and judged.span_seconds else 86400,
        origin=origin,
        stage_origin=stage,
        rule=judged,
    )


def net_rule(**overrides: Any) -> dict[str, Any]:
    """A net_savings rule over the three windows."""
    return {"metric": "net_savings", "op": ">=", "threshold": 0, "span": "3h", **overrides}


# --- cost ---------------------------------------------------------------------------------


def test_the_cost_sentence_sums_the_span_as_the_rule_does() -> None:
    """Savings 3 + 5 + 2 = 10 (baseline 20 − paid 10); fixed 48 a day over 3 of 24 hours
    = 6 (routing 12 · 3/24 = 1.5, gpu 36 · 3/24 = 4.5); net 4, per day 4 · 24/3 = 32; the
    interval: mean 10/400 per result, window residuals 0.5, 0, −0.5, so ±t·√(0.5·3/2)."""
    cost = cost_of(config(net_rule(span="24h")))
    half = T_95_2 * math.sqrt(0.5 * 3 / 2)
    terms = cost["terms"]
    assert terms["net_savings"] == 4.0 and terms["fixed_cost"] == 6.0
    assert terms["fixed_costs"] == {"routing": 1.5, "gpu": 4.5}
    assert terms["low"] == pytest.approx(4.0 - half, abs=1e-4)
    assert terms["high"] == pytest.approx(4.0 + half, abs=1e-4)
    assert shown(spans.cost_sentence(cost)) == (
        "Over the 3h since the task's first window (from 2026-11-30 00:00 UTC to 2026-11-30 "
        "03:00 UTC: 3 windows with results, 400 results) offloading saved 10.00 against the "
        "cloud baseline: paid 10.00 (edge 4.00, cloud 6.00) against 20.00 for the cloud "
        "alone. Fixed costs 6.00 for those 3h (gpu 4.50, routing 1.50), at 48.00 a day; net "
        f"savings **4.00** (95% interval {4.0 - half:.6f} to {4.0 + half:.2f}), 32.00 a day."
    )


def test_a_span_cut_by_the_stage_and_a_loss_read_as_such() -> None:
    """From the stage's first window (the second): savings 5 + 2 = 7 against fixed 4 (2
    hours of 48 a day), net 3; a window that costs more than its baseline is a loss."""
    cost = cost_of(config(net_rule()), origin=FIRST + 1, stage=FIRST + 1)
    assert cost["cut"] == "stage" and cost["terms"]["net_savings"] == 3.0
    assert shown(spans.cost_sentence(cost)).startswith(
        "Over the 2h since the stage began (from 2026-11-30 01:00 UTC"
    )
    # A task whose windows are not whole minutes reads its times to the second.
    assert shown(spans.cost_sentence(cost, seconds=True)).startswith(
        "Over the 2h since the stage began (from 2026-11-30 01:00:00 UTC"
    )
    [loss] = [SpanWindow(FIRST, 10, 1.0, 2.0, 2.5)]
    lost = cost_view(
        config(), [loss], at=FIRST, span_seconds=HOUR, origin=FIRST, stage_origin=None, rule=None
    )
    assert lost["cut"] is None
    said = shown(spans.cost_sentence(lost))
    assert said.startswith("Over the last 1h (")
    assert "offloading cost 0.500000 more than the cloud baseline" in said
    # One window has no interval: none is written.
    assert "interval" not in said


def test_the_cost_chart_draws_each_component_of_each_window() -> None:
    cost = cost_of(config(net_rule()))
    frame = spans.cost_frame(cost)
    drawn = as_sent(charts.draw(spans.COST, frame, order=list(spans.COMPONENTS.values())))
    [data] = drawn["datasets"].values()
    by = {(row["component"], row["window_start"][:13]): row["amount"] for row in data}
    fixed = 48 / 24
    for k, (_, edge, cloud, base) in enumerate(COSTS):
        hour = f"2026-11-30T{k:02d}"
        assert by[("paid edge", hour)] == edge and by[("paid cloud", hour)] == cloud
        assert by[("cloud baseline", hour)] == base and by[("fixed share", hour)] == fixed
        assert by[("net savings", hour)] == pytest.approx(base - edge - cloud - fixed)
    assert len(data) == 5 * 3
    assert drawn["layer"][0]["encoding"]["color"]["sort"] == list(spans.COMPONENTS.values())


@pytest.mark.parametrize(
    ("rule", "verdict", "said"),
    [
        (
            net_rule(),
            "ok",
            "The net_savings rule (net_savings >= 0 over 3h) holds: its 95% interval reaches "
            "at most {high}, not below 0.",
        ),
        (
            net_rule(threshold=10, mode="notify"),
            "breach",
            "The net_savings rule (net_savings >= 10 over 3h, notify mode: a notice, never a "
            "rollback) is breached: its 95% interval reaches at most {high}, below 10. In "
            "canary and full it rolls the task back; in shadow it leaves a notice.",
        ),
        (
            net_rule(min_samples=1000),
            "insufficient",
            "The net_savings rule (net_savings >= 0 over 3h) cannot judge yet: 400 results in "
            "the span, fewer than min_samples 1000.",
        ),
    ],
)
def test_the_net_savings_rule_in_words(rule: dict[str, Any], verdict: str, said: str) -> None:
    cost = cost_of(config(rule))
    assert cost["rule"]["verdict"] == verdict
    high = f"{4.0 + T_95_2 * math.sqrt(0.75):.2f}"
    sentence = spans.cost_rule_sentence(cost, stage="canary", rule_threshold=rule["threshold"])
    assert shown(sentence) == said.format(high=high)


def test_without_a_net_savings_rule_or_out_of_its_stages_the_page_says_so() -> None:
    cost = cost_of(config())
    assert cost["rule"] is None
    none = shown(spans.cost_rule_sentence(cost, stage="canary", rule_threshold=None))
    assert none.startswith("No net_savings rule is set: cost never rolls this task back.")
    assert "fixed_cost_per_day is 48.00 now" in none
    idle = shown(spans.cost_rule_sentence(cost, stage="rolled_back", rule_threshold=0.0))
    assert idle == (
        "The net_savings rule judges in shadow, canary and full only; the task is rolled_back."
    )


# --- input lengths ------------------------------------------------------------------------

# Bin 5 holds 256-511 tokens, bin 6 512-1023. The baseline: 100 inputs in bin 5. Now: each
# of four hourly windows 25 in bin 5 and 25 in bin 6.
BASE = [100 if i == 5 else 0 for i in range(lengths.BINS)]
NOW = [25 if i in (5, 6) else 0 for i in range(lengths.BINS)]


def shifted_psi(now: tuple[float, float], base: tuple[float, float]) -> float:
    """The index over the two bins either side holds, 0.5 added to each count."""
    a = [x + 0.5 for x in now]
    b = [x + 0.5 for x in base]
    p = [x / sum(a) for x in a]
    q = [x / sum(b) for x in b]
    return sum((pi - qi) * math.log(pi / qi) for pi, qi in zip(p, q, strict=True))


def lengths_of(found: TaskConfig, baseline: Baseline | None, *, stage: str = "canary") -> Any:
    rows = [
        SpanWindow(FIRST + k, 50, 0.0, 0.0, 0.0, tuple(NOW), 5 if k == 3 else 0) for k in range(4)
    ]
    return lengths_view(
        found,
        rows,
        baseline,
        at=FIRST + 3,
        span_seconds=4 * HOUR,
        stage_origin=FIRST,
        rule=judging_rule(found, "input_shift") if stage != "rolled_back" else None,
        alert_rule=input_shift_rule(found.rollback),
    )


SHIFT_RULE = {"metric": "input_shift", "op": "<=", "threshold": 0.25, "span": "4h"}


def test_the_two_histograms_and_the_index_between_them() -> None:
    """Now: 100 in bin 5 and 100 in bin 6 (half each); the baseline all in bin 5; the
    index of (100, 100) against (100, 0), and each quarter's of (25, 25) against it."""
    baseline = Baseline(tuple(BASE), 2, "the offload grade of 2026-11-29", None, None)
    found = lengths_of(config(SHIFT_RULE), baseline)
    whole, quarter = shifted_psi((100, 100), (100, 0)), shifted_psi((25, 25), (100, 0))
    assert found["psi"] == pytest.approx(whole)
    base_frame, now_frame = spans.histogram_frames(found)
    assert base_frame is not None
    assert list(now_frame["bin"]) == ["256-511", "512-1023"]
    assert list(now_frame["share"]) == [0.5, 0.5] and list(now_frame["count"]) == [100, 100]
    assert list(base_frame["share"]) == [1.0, 0.0] and list(base_frame["count"]) == [100, 0]
    top = spans.histogram_top(base_frame, now_frame)
    assert top == 1.0
    drawn = as_sent(charts.histogram(spans.NOW_BARS, now_frame, top=top))
    [data] = drawn["datasets"].values()
    assert [(r["bin"], r["share"], r["count"]) for r in data] == [
        ("256-511", 0.5, 100),
        ("512-1023", 0.5, 100),
    ]
    assert drawn["encoding"]["y"]["scale"]["domain"] == [0, 1.0]

    # Medians: the geometric middle of the bin holding the half (256-511: √(256·512)).
    middle = math.sqrt(256 * 512)
    assert shown(spans.lengths_sentence("t", found)) == (
        f"Over the last 4h (to 2026-11-30 04:00 UTC, 200 results) inputs are about "
        f"{middle:,.0f} tokens at the median, against about {middle:,.0f} tokens in the "
        "baseline, the offload grade of 2026-11-29 (100 results): population stability "
        f"index **{whole:.2f}** (0 is the same shape; 0.1 is a moderate shift, 0.25 a large "
        "one). 2.5% of inputs are over the cap now, 2.0% in the baseline."
    )
    assert shown(spans.alert_sentence(found)) == (
        "The input-shift alert opens at an index of 0.10: the index is at or above it."
    )
    assert shown(spans.shift_rule_sentence(found, stage="canary", rule_threshold=0.25)) == (
        "The input_shift rule (input_shift <= 0.25 over 4h) fires when the whole span's index "
        "and each of its four quarters' are above 0.25 (a burst shorter than half the span "
        f"never fires). It is breached: the span's index is {whole:.2f}, its quarters' "
        f"{', '.join([f'{quarter:.2f}'] * 4)}. In canary and full it rolls the task back and "
        "marks it for a re-grade; in shadow it leaves a notice."
    )


def test_without_a_baseline_only_now_is_drawn_and_the_page_says_what_makes_one() -> None:
    found = lengths_of(config(), None)
    base_frame, now_frame = spans.histogram_frames(found)
    assert base_frame is None and list(now_frame["count"]) == [100, 100]
    said = shown(spans.lengths_sentence("t", found))
    assert "There is no baseline to compare them with yet" in said
    assert "`shadowplane grade --task t`" in said
    assert shown(spans.alert_sentence(found)).endswith(
        "without a baseline it has nothing to compare."
    )
    # The task's rules hold no input_shift rule: the alert still watches, the rule does not.
    assert shown(spans.shift_rule_sentence(found, stage="canary", rule_threshold=None)) == (
        "No input_shift rule is set: a shift opens the alert but never rolls this task back."
    )


def test_a_shift_rule_that_cannot_judge_says_why_and_one_out_of_its_stages_says_so() -> None:
    baseline = Baseline(tuple(BASE), None, "the shadow windows it was promoted from")
    few = lengths_of(config({**SHIFT_RULE, "min_samples": 500}), baseline)
    said = shown(spans.shift_rule_sentence(few, stage="canary", rule_threshold=0.25))
    assert "It cannot judge yet: the span's index is" in said
    assert said.endswith("200 results in the span, fewer than min_samples 500.")
    assert "fewer" in shown(spans.alert_sentence({**few, "alert_min_results": 500}))
    idle = lengths_of(config(SHIFT_RULE), baseline, stage="rolled_back")
    assert shown(spans.shift_rule_sentence(idle, stage="rolled_back", rule_threshold=0.25)) == (
        "The input_shift rule judges in shadow, canary and full only; the task is rolled_back."
    )


# --- the re-grade mark and the decisions ----------------------------------------------------


def test_the_regrade_banner_says_what_the_mark_means_and_what_clears_it() -> None:
    assert spans.regrade_banner("t", {"needs_regrade": False}) is None
    at = datetime(2026, 11, 30, 3, 2, tzinfo=UTC)
    said = shown(spans.regrade_banner("ticket_classify", {"needs_regrade": True, "shifted_at": at}))
    assert said == (
        "**Re-grade needed.** The inputs of ticket_classify shifted: an input_shift rollback "
        "marked it at 2026-11-30 03:02 UTC. Promotion is refused, forced or not, until a grade "
        "over traffic since 2026-11-30 03:02 UTC says offload; such a grade clears the mark "
        "(`shadowplane grade --task ticket_classify` once that traffic is in). Re-grade, don't "
        "re-tune thresholds."
    )


def resolved(rule: dict[str, Any]) -> ResolvedRule:
    found = judging_rule(config(rule), rule["metric"])
    assert found is not None
    return found


def test_a_net_savings_rollback_lists_its_money() -> None:
    verdict = rules.judge_net_savings(
        cost_rows(),
        resolved(net_rule(threshold=10)),
        at=FIRST + 2,
        origin=FIRST,
        window_seconds=HOUR,
        fixed_cost_per_day=48,
        fixed_costs={"routing": 12, "gpu": 36},
    )
    decision = {"evidence": {"how": "net_savings", "span": verdict.evidence, "examples": []}}
    assert views.evidence_kind(decision) == "span"
    high = 4.0 + T_95_2 * math.sqrt(0.75)
    assert shown(spans.span_lines(decision["evidence"])) == (
        "- cloud baseline 20.00 − paid 10.00 (edge 4.00, cloud 6.00) = savings 10.00\n"
        "- fixed costs 6.00 for 3h (gpu 4.50, routing 1.50)\n"
        f"- net savings **4.00** over 400 results in 3 windows; 95% interval "
        f"{4.0 - T_95_2 * math.sqrt(0.75):.6f} to {high:.2f}"
    )
    assert spans.span_bins(decision["evidence"]) is None


def test_an_input_shift_rollback_lists_its_index_quarters_and_bins() -> None:
    rows = [SpanWindow(FIRST + k, 50, 0.0, 0.0, 0.0, tuple(NOW)) for k in range(4)]
    baseline = Baseline(tuple(BASE), None, "the offload grade of 2026-11-29")
    verdict = rules.judge_input_shift(
        rows, resolved(SHIFT_RULE), baseline, at=FIRST + 3, origin=FIRST, window_seconds=HOUR
    )
    assert verdict.verdict == "breach"
    found = {"how": "input_shift", "span": verdict.evidence, "examples": ["r-9", "r-4"]}
    whole, quarter = shifted_psi((100, 100), (100, 0)), shifted_psi((25, 25), (100, 0))
    assert shown(spans.span_lines(found)) == "\n".join(
        [
            f"- population stability index **{whole:.2f}** over 4h (200 results) against the "
            "offload grade of 2026-11-29 (100 results)",
            *(f"- quarter {k}: index {quarter:.2f} over 50 results" for k in range(1, 5)),
        ]
    )
    bins = spans.span_bins(found)
    assert bins is not None
    assert bins.to_dict("records") == [
        {"tokens": "256-511", "baseline": 1.0, "now": 0.5},
        {"tokens": "512-1023", "baseline": 0.0, "now": 0.5},
    ]
    assert shown(spans.longest_inputs(found) or "") == (
        "Longest inputs of the span (request ids): r-9, r-4"
    )


def test_the_regrade_decisions_read_as_words() -> None:
    decision = {
        "created_at": datetime(2026, 11, 30, 3, 2, tzinfo=UTC),
        "action": "needs_regrade",
        "actor": "policy",
        "stage_before": "rolled_back",
        "stage_after": "rolled_back",
        "rule": None,
        "bucket": None,
    }
    assert shown(views.decision_heading(decision)) == (
        "**2026-11-30 03:02 UTC** · re-grade needed by **policy** (stays rolled_back)"
    )
    regraded = {**decision, "action": "regraded", "actor": "grading"}
    assert shown(views.decision_heading(regraded)) == (
        "**2026-11-30 03:02 UTC** · re-graded by **grading** (stays rolled_back)"
    )
    # Neither carries span evidence: its reason is the whole of it.
    assert views.evidence_kind({**decision, "evidence": {"rollback": 4}}) is None
