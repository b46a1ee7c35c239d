"""dashboard.task.whatif: the what-if's period, its kept replays and its figures."""

from __future__ import annotations

import datetime as dt

from dashboard.task import whatif

DAY = dt.date(2026, 11, 30)


def figures(num: int) -> dict[str, object]:
    return {
        "edge_share": {"num": num, "value": num / 10},
        "agreement": {"value": 0.9, "low": 0.8, "high": 0.95, "den": num},
        "offload_fail_rate": {"num": 1, "den": num, "value": 1 / num},
        "cost": 0.5,
        "savings": 2.0,
    }


REPLAY = {
    "candidate": {"max_input_tokens": 600, "min_confidence": 0.9},
    "current": {"max_input_tokens": None, "min_confidence": None},
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


def test_the_sliders_range_and_the_default_day() -> None:
    assert whatif.cap_range((128, 512), None) == (4096, 512)
    assert whatif.cap_range((128, 4000), 6000) == (8000, 6000)
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
    assert whatif.setting_words(REPLAY["current"]) == "no cap"
    assert whatif.figures(REPLAY["buckets"][1], "candidate") == (
        "edge serves 4 of 10 (40.0%); agreement 90.0% (80.0%–95.0%) over 4 pairs; offload "
        "failures 1 of 4 edge runs (25.0%); cost 0.500000 against 2.50 cloud-only (saves 2.00)"
    )
    since, until, _ = whatif.period(DAY, DAY)
    summary = whatif.summary(REPLAY, since, until)
    assert summary.startswith("From 2026-11-30 00:00 UTC to 2026-12-01 00:00 UTC, 10 results.")
    assert "**Today** (no cap): edge serves 5 of 10" in summary
    rows = whatif.rows(REPLAY)
    assert [(r["bucket"], r["setting"]) for r in rows] == [
        ("0-511", "candidate"),
        ("0-511", "today"),
        ("all", "candidate"),
        ("all", "today"),
    ]
    assert rows[1]["edge served"] == 5 and rows[0]["cloud-only cost"] == 2.5
    assert whatif.bucket_lines(REPLAY).startswith("- 0-511, candidate: edge serves 4 of 10")
    assert "\n" not in whatif.bucket_lines(REPLAY)  # the `all` row is in the summary


def test_a_replay_without_results_has_no_total() -> None:
    assert whatif.total(REPLAY) is not None
    empty = {**REPLAY, "buckets": [{**REPLAY["buckets"][1], "n_results": 0}]}
    assert whatif.total(empty) is None
    assert "No results stored from 2026-11-30 00:00 UTC" in whatif.no_results(
        *whatif.period(DAY, DAY)[:2]
    )
