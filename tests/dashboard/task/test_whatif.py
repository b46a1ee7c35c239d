"""shadowplane_dashboard.task.whatif: the what-if's period, its kept replays, its figures in percent,
today's flag in words, and the curve's charts."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from shadowplane_dashboard.task import whatif
from tests.dashboard.vega import as_sent

DAY = dt.date(2026, 11, 30)


def figures(num: int) -> dict[str, object]:
    return {
        "edge_share": {"num": num, "value": num / 10},
        "agreement": {"value": 0.9, "low": 0.8, "high": 0.95, "den": num},
        "offload_fail_rate": {"num": 1, "den": num, "value": 1 / num},
        "cost": 0.5,
        "savings": 2.0,
    }


def point(cap: int, served: int, agree: int | None, cost: float) -> dict[str, Any]:
    pairs = 0 if agree is None else served
    return {
        "max_input_tokens": cap,
        "edge_share": {"num": served, "value": served / 10},
        "agreement": {
            "value": None if agree is None else agree / pairs,
            "low": None if agree is None else 0.5,
            "high": None if agree is None else 1.0,
            "den": pairs,
        },
        "offload_fail_rate": {"num": 0, "den": served, "value": 0.0},
        "cost": cost,
        "savings": 2.5 - cost,
    }


ROLLED_BACK = {
    "stage": "rolled_back",
    "edge_percent": 0,
    "killed": False,
    "max_input_tokens": None,
    "min_confidence": None,
}
REPLAY = {
    "candidate": {"max_input_tokens": 600, "min_confidence": 0.9},
    "current": {**ROLLED_BACK, "stage": "full", "edge_percent": 100},
    "buckets": [
        {
            "bucket": "0-511",
            "n_results": 10,
            "baseline_cost": 2.5,
            "candidate": figures(4),
            "current": figures(5),
        },
        {
            "bucket": "all",
            "n_results": 10,
            "baseline_cost": 2.5,
            "candidate": figures(4),
            "current": figures(5),
        },
    ],
    # The first cap serves one result, with no pair: no agreement there.
    "curve": [point(40, 1, None, 2.4), point(300, 3, 2, 2.0), point(1200, 4, 3, 0.5)],
}


def test_the_period_runs_from_the_first_day_to_the_end_of_the_last() -> None:
    since, until, problem = whatif.period(DAY, DAY)
    assert (since, until, problem) == (
        dt.datetime(2026, 11, 30, tzinfo=dt.UTC),
        dt.datetime(2026, 12, 1, tzinfo=dt.UTC),
        None,
    )
    assert "ends before it starts" in str(whatif.period(DAY, DAY - dt.timedelta(days=1))[2])
    assert "at most 31 days" in str(whatif.period(DAY - dt.timedelta(days=31), DAY)[2])
    assert whatif.period(DAY - dt.timedelta(days=30), DAY)[2] is None


def test_the_default_day() -> None:
    end = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    assert whatif.default_day((end - dt.timedelta(days=1), end), end) == DAY
    assert whatif.default_day(None, end) == end.date()


def test_only_the_newest_replays_are_kept() -> None:
    kept: dict[object, object] = {}
    settings = [("t", DAY, DAY, cap, None) for cap in range(whatif.KEPT + 2)]
    for setting in settings:
        whatif.keep(kept, setting, {"cap": setting[3]})  # type: ignore[arg-type]
    assert list(kept) == settings[-whatif.KEPT :]


def test_a_replay_in_sentences_and_rows() -> None:
    assert (
        whatif.setting_words(REPLAY["candidate"]) == "cap 600 tokens, edge confidence at least 0.9"
    )
    assert whatif.setting_words({"max_input_tokens": 12000, "min_confidence": None}) == (
        "cap 12,000 tokens"
    )
    assert whatif.figures(REPLAY["buckets"][1], "candidate") == (
        "edge serves 4 of 10 (40.0%); agreement 90.0% (80.0%–95.0%) over 4 pairs; offload "
        "failures 1 of 4 edge runs (25.0%); cost 0.500000 against 2.50 cloud-only (saves 2.00)"
    )
    since, until, _ = whatif.period(DAY, DAY)
    summary = whatif.summary(REPLAY, since, until)
    assert summary.startswith("From 2026-11-30 00:00 UTC to 2026-12-01 00:00 UTC, 10 results.")
    assert (
        "**Today** (full: the edge serves 100.0% of the requests the router finds eligible, "
        "no cap): edge serves 5 of 10 (50.0%)"
    ) in summary
    rows = whatif.rows(REPLAY)
    assert [(r["bucket"], r["setting"]) for r in rows] == [
        ("0-511", "candidate"),
        ("0-511", "today"),
        ("all", "candidate"),
        ("all", "today"),
    ]
    assert rows[1]["edge served"] == 5 and rows[1]["edge share"] == "50.0%"
    assert rows[0]["agreement (95% interval)"] == "90.0% (80.0%–95.0%)"
    assert rows[0]["offload-failure rate"] == "25.0%" and rows[0]["cost"] == "0.500000"
    assert whatif.bucket_lines(REPLAY).startswith("- 0-511, candidate: edge serves 4 of 10")
    assert "\n" not in whatif.bucket_lines(REPLAY)  # the `all` row is in the summary


def test_a_replay_without_results_has_no_total() -> None:
    assert whatif.total(REPLAY) is not None
    empty = {**REPLAY, "buckets": [{**REPLAY["buckets"][1], "n_results": 0}]}
    assert whatif.total(empty) is None
    assert "No results stored from 2026-11-30 00:00 UTC" in whatif.no_results(
        *whatif.period(DAY, DAY)[:2]
    )


@pytest.mark.parametrize(
    ("flag", "words"),
    [
        ({}, "rolled back: every request goes to the cloud"),
        (
            {"stage": "shadow"},
            "in shadow: the cloud serves every request, the edge only runs beside it",
        ),
        ({"stage": "cloud"}, "cloud: every request goes to the cloud"),
        (
            {"stage": "canary", "edge_percent": 5, "max_input_tokens": 2048},
            "canary: the edge serves 5.0% of the requests the router finds eligible, "
            "cap 2,048 tokens",
        ),
        (
            {"stage": "canary", "edge_percent": 0, "killed": True},
            "kill switch on: every request goes to the cloud",
        ),
        ({"stage": None}, "no flag: every request goes to the cloud"),
    ],
)
def test_today_in_words_is_what_the_flag_does(flag: dict[str, Any], words: str) -> None:
    assert whatif.today_words({**ROLLED_BACK, **flag}) == words


def test_the_curve_as_charts_today_rolled_back() -> None:
    none = {"value": None, "num": 0, "den": 0, "low": None, "high": None}
    nothing = {"edge_share": {"num": 0, "value": 0.0}, "agreement": none, "cost": 2.5}
    replay = {
        **REPLAY,
        "current": ROLLED_BACK,
        "buckets": [{**b, "current": nothing} for b in REPLAY["buckets"]],
    }
    frame = whatif.curve_frame(replay)
    assert list(frame["setting"]) == [whatif.CURVE] * 4 + [whatif.CANDIDATE, whatif.TODAY]
    # The curve starts at no edge and the cloud-only cost; today is no edge at all.
    assert (frame["edge_share"].iloc[0], frame["cost"].iloc[0]) == (0.0, 2.5)
    assert frame.set_index("setting").loc[whatif.TODAY, "edge_share"] == 0.0
    agreement, cost = whatif.curve_charts(frame)
    for chart in (agreement, cost):
        spec = as_sent(chart)
        marks = [layer["mark"]["type"] for layer in spec["layer"]]
        # Every layer's data has a value in each column it holds, and one colour legend.
        for layer in spec["layer"]:
            rows = spec["datasets"][layer["data"]["name"]]
            assert rows, layer["mark"]
            for column in rows[0]:
                assert any(r[column] is not None for r in rows), (layer["mark"], column)
        assert len({str(layer["encoding"]["color"]) for layer in spec["layer"]}) == 1
        assert "rule" in marks and "line" in marks
    sent = as_sent(agreement)
    agreement_layers = sent["layer"]
    points = [layer for layer in agreement_layers if layer["mark"]["type"] == "point"]
    # Only the candidate has an agreement to mark; the line leaves out the cap without pairs.
    datasets = sent["datasets"]
    assert [r["setting"] for r in datasets[points[0]["data"]["name"]]] == [whatif.CANDIDATE]
    line = next(layer for layer in agreement_layers if layer["mark"]["type"] == "line")
    assert [r["cap"] for r in datasets[line["data"]["name"]]] == ["≤ 300 tokens", "≤ 1,200 tokens"]


def test_the_curve_in_words() -> None:
    words = whatif.curve_words(REPLAY)
    assert "From a cap of 40 to 1,200 tokens" in words
    assert "edge confidence reaches 0.9" in words
    assert "share goes from 10.0% to 40.0%, agreement from — to 75.0%" in words
    assert "the cost from 2.40 to 0.500000 against 2.50 cloud-only" in words
    assert whatif.curve_words({**REPLAY, "curve": []}).startswith("No result the router found")
    assert [r["cap (tokens)"] for r in whatif.curve_rows(REPLAY)] == [40, 300, 1200]
