"""dashboard.task.evidence: the Task page's charts and the frames and sentences under them."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest

from dashboard import charts
from dashboard.task import evidence

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
    assert evidence.threshold(CONFIG, evidence.AGREEMENT) == 0.85
    assert evidence.threshold(CONFIG, evidence.ROUTE_ACCURACY) == 0.8
    # Lines without an interval draw no rule.
    assert evidence.threshold(CONFIG, evidence.CONFLICTS) is None


def test_every_chart_draws_with_its_threshold_and_events() -> None:
    frame = windows()
    events = charts.events(
        [{"created_at": START, "reason": "rolled back"}],
        [{"window_start": None, "opened_at": START.isoformat(), "message": "jump"}],
    )
    drawn = charts.draw(
        evidence.AGREEMENT, frame, order=["0-511", "all"], threshold=0.85, events=events
    ).to_dict()
    marks = [layer["mark"]["type"] for layer in drawn["layer"]]
    assert marks == ["area", "line", "rule", "rule", "rule"]
    assert drawn["title"] == evidence.AGREEMENT.title
    latency = charts.draw(
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
    ).to_dict()
    assert latency["layer"][0]["encoding"]["strokeDash"]["field"] == "percentile"


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
