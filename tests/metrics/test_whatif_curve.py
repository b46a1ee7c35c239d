"""The what-if's pure parts: what today's flag serves, the table's sums per bucket and the
curve's caps and points, on hand-made rows summed per input length."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.metrics.whatif import LengthRow, Served, Today, buckets, caps, curve, today_of

FLAG = {"stage": "canary", "edge_percent": 25, "max_input_tokens": 900, "killed": False}


@pytest.mark.parametrize(
    ("changes", "percent"),
    [
        ({}, 25),
        ({"stage": "full", "edge_percent": 100}, 100),
        ({"stage": "rolled_back", "edge_percent": 0}, 0),
        ({"stage": "shadow", "edge_percent": 0}, 0),
        ({"stage": "cloud", "edge_percent": 0}, 0),
        # The kill switch keeps the stage and zeroes the share; a stale share in a stage
        # that serves nothing, or a kill flag that is not exactly false, serves nothing.
        ({"killed": True, "edge_percent": 0}, 0),
        ({"stage": "rolled_back"}, 0),
        ({"killed": None}, 0),
    ],
)
def test_today_is_what_the_flag_serves_now(changes: dict[str, Any], percent: int) -> None:
    today = today_of({**FLAG, **changes})
    assert today.edge_percent == percent
    assert today.max_input_tokens == 900
    assert today.setting()["stage"] == {**FLAG, **changes}["stage"]


def test_no_flag_serves_nothing() -> None:
    assert today_of(None) == Today(None, 0, None, False)


def row(tokens: int, n: int, served: Served, today: Served | None = None) -> LengthRow:
    return LengthRow(tokens, n, baseline_cost=1.0 * n, candidate=served, today=today or Served())


# Three input lengths, 10 results each costing 1.0 cloud-only.
ROWS = [
    # 100 tokens: 8 served by the edge, 6 pairs of which 6 agree; 8 edge runs, none fails,
    # each costing 0.25 instead of 1.0 (saved 8 × 0.75 = 6.0).
    row(100, 10, Served(n=8, pairs=6, agree=6, edge_runs=8, saved=6.0), Served(n=2, saved=1.5)),
    # 600 tokens: nothing the candidate serves.
    row(600, 10, Served()),
    # 3000 tokens: 5 served, 4 pairs of which 1 agrees; 5 runs, 2 failing (each costs its
    # edge side on top: saved 3 × 0.75 - 2 × 0.25 = 1.75).
    row(3000, 10, Served(n=5, pairs=4, agree=1, edge_runs=5, offload_fails=2, saved=1.75)),
]


def test_the_curve_has_a_point_per_length_the_edge_serves() -> None:
    points = curve(ROWS)
    assert [p["max_input_tokens"] for p in points] == [100, 3000]
    first, last = points
    assert first["edge_share"]["value"] == 8 / 30
    assert first["agreement"]["value"] == 6 / 6
    assert first["offload_fail_rate"]["value"] == 0
    assert first["cost"] == 30.0 - 6.0 and first["savings"] == 6.0
    assert last["edge_share"]["value"] == 13 / 30
    assert last["agreement"]["value"] == 7 / 10
    assert last["offload_fail_rate"]["value"] == 2 / 13
    assert last["cost"] == pytest.approx(30.0 - 7.75)
    assert curve([row(5, 3, Served())]) == []


def test_past_the_most_points_the_caps_spread_over_what_the_edge_serves() -> None:
    # 1 result served at each of 10 lengths, then 10 at length 50: with 4 points the caps
    # are where 1/4, 2/4, 3/4 and all of the 20 served results are reached.
    rows = [row(length, 1, Served(n=1)) for length in range(1, 11)]
    rows.append(row(50, 10, Served(n=10)))
    assert caps(rows, max_points=20) == [*range(1, 11), 50]
    assert caps(rows, max_points=4) == [5, 10, 50]
    assert [p["max_input_tokens"] for p in curve(rows, max_points=4)] == [5, 10, 50]


def test_the_table_sums_each_setting_within_its_own_cap() -> None:
    table = {b["bucket"]: b for b in buckets(ROWS, [512], candidate_cap=700, today_cap=None)}
    assert list(table) == ["0-511", "512+", "all"]
    assert table["512+"]["n_results"] == 20 and table["all"]["baseline_cost"] == 30.0
    # The candidate's cap of 700 leaves out the 3000-token results; today has no cap.
    assert table["512+"]["candidate"]["edge_share"]["num"] == 0
    assert table["all"]["candidate"]["edge_share"]["num"] == 8
    assert table["all"]["current"]["edge_share"]["num"] == 2
    assert table["all"]["current"]["cost"] == 30.0 - 1.5
    assert table["512+"]["current"]["agreement"]["value"] is None
