"""shadowplane_dashboard.task.evidence: the Task page's charts and the frames and sentences under them."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest

from shadowplane_dashboard import charts
from shadowplane_dashboard.task import evidence
from tests.dashboard.vega import as_sent, problems

CONFIG = {
    "rollback": {
        "rules": [
            {"metric": "agreement", "threshold": 0.9, "mode": "off"},
            {"metric": "agreement", "threshold": 0.85},
            {"metric": "route_acc", "threshold": 0.8},
        ]
    }
}
START = pd.Timestamp("2026-11-30 02:00", tz="UTC")


def windows() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "window_start": [START, START, START + pd.Timedelta(minutes=5)],
            "bucket": ["0-511", "all", "all"],
            "closed": [True, True, False],
            "agreement": [0.9, 0.95, 0.5],
            "agreement_low": [0.8, None, 0.4],
            "agreement_high": [0.95, None, 0.6],
            "n_pairs": [40, 80, 3],
            "total_cost": [1.5, 2.5, 0.0],
            "baseline_cost": [3.0, 4.0, 0.0],
            "net_savings": [None, 1.0, None],
        }
    )


def test_the_rule_drawn_is_the_first_that_is_not_off() -> None:
    assert evidence.rule_threshold(CONFIG, "agreement") == 0.85
    assert evidence.rule_threshold(CONFIG, "degrade_rate") is None
    assert evidence.threshold(CONFIG, evidence.DEGRADES) is None
    assert evidence.threshold(CONFIG, evidence.ROUTE_ACCURACY) == 0.8
    # Lines without an interval draw no rule.
    assert evidence.threshold(CONFIG, evidence.CONFLICTS) is None


def the_events() -> pd.DataFrame:
    return charts.events(
        [{"created_at": START, "reason": "rolled back"}],
        [{"window_start": None, "opened_at": START.isoformat(), "message": "jump"}],
    )


def test_the_difference_chart_is_agreement_less_the_threshold_with_the_floor() -> None:
    """Per window and bucket, agreement and its interval less the threshold; the cloud
    against itself less the same threshold where there were repeat pairs, without a band;
    a window without pairs draws nothing."""
    frame = windows().assign(
        self_agreement=[0.97, None, None],
        self_agreement_low=[0.9, None, None],
        self_agreement_high=[0.99, None, None],
    )
    frame.loc[2, "agreement"] = None  # no pair compared in the open window
    drawn = evidence.difference_frame(frame, 0.85)
    edge = drawn[drawn["series"] == evidence.EDGE]
    assert list(edge["bucket"]) == ["0-511", "all"]
    assert list(edge["agreement"]) == [0.9, 0.95]
    assert list(edge["difference"]) == pytest.approx([0.9 - 0.85, 0.95 - 0.85])
    # The all bucket's window has no interval: no band there.
    assert edge["difference_low"].isna().tolist() == [False, True]
    assert list(edge["difference_low"].dropna()) == pytest.approx([0.8 - 0.85])
    assert list(edge["difference_high"].dropna()) == pytest.approx([0.95 - 0.85])
    floor = drawn[drawn["series"] == evidence.FLOOR]
    assert list(floor["bucket"]) == ["0-511"]
    assert list(floor["difference"]) == pytest.approx([0.97 - 0.85])
    assert floor["difference_low"].isna().all() and floor["difference_high"].isna().all()
    # Windows from before repeat pairs were counted have no such column: no floor at all.
    older = evidence.difference_frame(windows(), 0.85)
    assert set(older["series"]) == {evidence.EDGE}
    # No pair in any window: nothing to draw, said in words instead.
    empty = evidence.difference_frame(windows().assign(agreement=None), 0.85)
    assert empty.empty and not charts.drawable(evidence.DIFFERENCE, empty)


def test_the_threshold_agreement_is_read_against() -> None:
    """The agreement rule's (the first not off), else the promotion gate's lower bound."""
    assert evidence.agreement_threshold(CONFIG) == (0.85, "the agreement rule's")
    gate = {"rollback": {"rules": []}, "promotion": {"agreement_lower_bound": 0.95}}
    assert evidence.agreement_threshold(gate) == (0.95, "the promotion gate's")
    assert evidence.zero_label(0.85, "the agreement rule's") == (
        "0 = 85.0% agreement (the agreement rule's threshold)"
    )


def test_every_chart_draws_with_its_threshold_and_events_and_nothing_vega_warns_of() -> None:
    """The difference chart: a light band, the edge's line and points, the floor's line,
    the zero rule and its label, and the events' rules in a legend of their own; a rate
    chart: a light band (never stacked) under its line, cut at a y range fitting the
    lines; none reads a time in local time or has a field without a value."""
    frame = windows().assign(
        self_agreement=[0.97, None, None],
        degrade_rate=[0.01, None, 0.02],
        degrade_rate_low=[0.0, None, 0.0],
        degrade_rate_high=[0.7, None, 0.8],
    )
    order = ["0-511", "all"]
    difference = charts.draw(
        evidence.DIFFERENCE,
        evidence.difference_frame(frame, 0.85),
        order=order,
        threshold=0.0,
        rule_label=evidence.zero_label(0.85, "the agreement rule's"),
        events=the_events(),
        seconds=True,
    )
    difference = as_sent(difference)
    [drawn, marked] = difference["layer"]
    assert [layer["mark"]["type"] for layer in drawn["layer"]] == [
        "area",
        "line",
        "point",
        "rule",
        "text",
    ]
    assert marked["mark"]["type"] == "rule" and difference["resolve"]["scale"]["color"] == (
        "independent"
    )
    assert difference["title"] == evidence.DIFFERENCE.title
    assert problems(difference, difference["datasets"]) == []

    degrades = as_sent(charts.draw(evidence.DEGRADES, frame, order=order, threshold=0.05))
    assert [layer["mark"]["type"] for layer in degrades["layer"]] == [
        "area",
        "line",
        "rule",
        "text",
    ]
    assert problems(degrades, degrades["datasets"]) == []
    # The y range fits the lines (1%, 2%) and the rule (5%), not the bands (up to 80%).
    low, high = degrades["layer"][1]["encoding"]["y"]["scale"]["domain"]
    assert low == 0.0 and 0.05 < high < 0.1
    latency_chart = charts.draw(
        evidence.of_bucket("latency", "all"),
        evidence.latencies(
            frame.assign(
                **{
                    f"{s}_latency_ms_{p}": 1.0
                    for s in ("edge", "cloud")
                    for p in ("p50", "p95", "p99")
                }
            )
        ),
        events=the_events(),
    )
    latency = as_sent(latency_chart)
    assert latency["layer"][0]["layer"][0]["encoding"]["strokeDash"]["field"] == "percentile"
    assert problems(latency, latency["datasets"]) == []


def test_a_chart_with_no_value_is_not_drawn() -> None:
    """A rate of edge attempts in windows with none (every value a gap) is said in words;
    Vega would draw an empty chart and warn of an infinite extent."""
    frame = windows().assign(degrade_rate=None)
    assert not charts.drawable(evidence.DEGRADES, frame)
    assert charts.drawable(evidence.CONFLICTS, windows().assign(conflict_rate=0.0))
    assert evidence.nothing_to_draw(evidence.DEGRADES) == evidence.no_edge_attempts(
        evidence.DEGRADES
    )
    assert evidence.nothing_to_draw(evidence.CONFLICTS) == (
        "Conflict rate: no value in these windows, so there is nothing to draw."
    )


def test_the_period_shown_starts_no_earlier_than_the_first_window() -> None:
    first = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)
    assert evidence.since(
        (first, first + dt.timedelta(days=2)), "the last 24 hours"
    ) == first + dt.timedelta(days=1)
    assert evidence.since((first, first + dt.timedelta(hours=2)), "the last 7 days") == first


def test_the_latest_closed_window_in_a_sentence() -> None:
    assert evidence.latest_line(windows()) == (
        "Latest closed window (2026-11-30 02:00 UTC): 0\\-511: agreement 90.0% (80.0%–95.0%) "
        "of 40 pairs, cloud vs itself: no repeat pairs; all: agreement 95.0% of 80 pairs, "
        "cloud vs itself: no repeat pairs."
    )
    assert evidence.latest_line(windows().assign(closed=False)) is None


def test_savings_over_the_windows() -> None:
    detail = windows()[lambda f: f["bucket"] == "all"]
    assert evidence.savings_line(detail, "all") == (
        "Over these windows (all): cost 2.50 against 4.00 for the cloud alone, saving 1.50; "
        "net of the edge's fixed cost 1.00."
    )
    costs = evidence.costs(detail)
    assert sorted(costs["series"].unique()) == ["cloud only", "edge + cloud"]
    assert len(costs) == 2 * len(detail)


@pytest.mark.parametrize("empty", [True, False])
def test_route_accuracy_frames(empty: bool) -> None:
    newest = {
        "window_start": "2026-11-30T00:00:00+00:00",
        "estimate": 0.9,
        "low": None if empty else 0.85,
        "high": 0.95,
        "n_labels": 30,
        "missed_offload": 0.05,
        "wrong_offload": 0.02,
    }
    routes = evidence.routes([newest])
    assert routes["window_start"].dt.tz is not None and list(routes["series"]) == ["route accuracy"]
    assert sorted(evidence.misses(routes)["kind"]) == ["missed_offload", "wrong_offload"]
    interval = "" if empty else " (85.0%–95.0%)"
    assert evidence.newest_accuracy(newest) == (
        f"Newest estimate (2026-11-30 00:00 UTC): route accuracy 90.0%{interval} from 30 "
        "labels; missed_offload 5.0%, wrong_offload 2.0%."
    )
