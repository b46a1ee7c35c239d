"""shadowplane_dashboard.task.grading and the noise floor in words: what the dashboard shows of a grade
made by the real `grade()` from traffic built here, and the cloud against itself in the
latest window's sentence, without a render (the difference chart's floor:
test_evidence)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd
import pytest

from controlplane.catalog.schemas import TaskConfig
from controlplane.grading.grade import Traffic, grade
from shadowplane_dashboard.task import evidence, grading
from tests.dashboard.conftest import shown

NOW = datetime(2026, 12, 1, tzinfo=UTC)
VETO = 0.7


def config(**extra: Any) -> TaskConfig:
    return TaskConfig.model_validate(
        {"task": "t", "comparator": {"kind": "label", "labels": ["a", "b"]}, **extra}
    )


def traffic(*, results: int = 20_000, p95: float = 2000.0, agree: int = 450) -> Traffic:
    return Traffic(
        since=NOW - timedelta(days=7),
        until=NOW,
        results=results,
        days=7,
        input_p50=400.0,
        input_p95=p95,
        input_tokens_sum=results * 500.0,
        repeat_pairs=500,
        repeat_agree=agree,
        repeat_invalid=0,
        repeat_diffs={"amount": 60, "currency": 5},
    )


def graded(found: Traffic, **extra: Any) -> dict[str, Any]:
    return grade("t", found, config(**extra), veto=VETO, computed_at=NOW)


def test_the_tier_line_names_the_tier_its_score_and_why() -> None:
    document = graded(traffic())
    assert document["score"] is not None and document["reasons"]
    assert shown(grading.tier_line(document)) == (
        f"grade: {document['tier']} ({document['score']:.2f}) — " + "; ".join(document["reasons"])
    )
    assert grading.tier_line(None) == "grade: not graded yet"
    thin = graded(traffic(results=10))
    assert thin["tier"] == "insufficient"
    assert shown(grading.tier_line(thin)) == "grade: insufficient — missing " + "; ".join(
        thin["missing"]
    )


def test_the_bars_are_the_dimensions_scores_and_the_weighted_score() -> None:
    document = graded(traffic())
    dims = document["dimensions"]
    frame = grading.bar_frame(document)
    assert list(frame["dimension"]) == [
        "input length",
        "determinism",
        grading.ERROR_COST_BAR,
        "frequency",
        grading.WEIGHTED,
    ]
    assert list(frame["score"]) == pytest.approx(
        [
            dims["input_length"]["score"],
            dims["determinism"]["score"],
            1 - config().error_cost,
            dims["frequency"]["score"],
            document["score"],
        ]
    )
    signals = [dims[d]["signal"] for d in ("input_length", "determinism", "error_cost")]
    assert list(frame["state"])[:3] == ["danger signal" if s else "no signal" for s in signals]


def test_the_veto_is_marked_and_no_weighted_score_is_drawn() -> None:
    document = graded(traffic(), error_cost=0.8)
    assert document["tier"] == "keep_cloud" and document["score"] is None
    frame = grading.bar_frame(document)
    states = dict(zip(frame["dimension"], frame["state"], strict=True))
    assert states[grading.ERROR_COST_BAR] == "veto" and grading.WEIGHTED not in states
    assert frame.loc[frame["dimension"] == grading.ERROR_COST_BAR, "score"].item() == (
        pytest.approx(0.2)
    )
    lines = shown(grading.dimension_lines(document, VETO))
    assert "**Veto**: error cost 0.8 is at or above 0.7" in lines
    tick = grading.veto_tick(VETO)
    assert tick.to_dict("records") == [
        {
            "dimension": grading.ERROR_COST_BAR,
            "at": pytest.approx(0.3),
            "label": "veto: error cost ≥ 0.7",
        }
    ]


def test_thresholds_noisy_fields_and_what_is_missing() -> None:
    dumped = config(grading={"tiers": {"offload": 0.8, "shadow": 0.6}}).model_dump(mode="json")
    assert grading.thresholds(dumped) == {"shadow ≥ 0.6": 0.6, "offload ≥ 0.8": 0.8}
    document = graded(traffic())
    # amount on 60 of 500 repeats is over the default 5%; currency on 5 of 500 is not.
    assert shown(grading.noisy_lines(document) or "") == (
        f"- **amount** — {60 / 500:.1%} (60 of 500 repeat pairs)"
    )
    assert grading.missing_lines(document) is None
    thin = graded(traffic(results=10))
    assert shown(grading.missing_lines(thin) or "").splitlines() == [
        f"- {m}" for m in thin["missing"]
    ]
    assert shown(grading.to_change_lines(thin)).splitlines() == [
        f"- {s}" for s in thin["to_change"]
    ]


def test_the_latest_window_says_the_floor_or_that_there_is_none() -> None:
    start = pd.Timestamp("2026-11-30 02:00", tz="UTC")
    frame = pd.DataFrame(
        {
            "window_start": [start, start],
            "bucket": ["0-511", "512+"],
            "closed": [True, True],
            "agreement": [0.9, 0.6],
            "agreement_low": [None, None],
            "agreement_high": [None, None],
            "n_pairs": [40, 10],
            "self_agreement": [0.95, None],
            "self_agreement_low": [0.8, None],
            "self_agreement_high": [0.99, None],
            "n_repeat_pairs": [20, 0],
        }
    )
    assert shown(evidence.latest_line(frame) or "") == (
        "Latest closed window (2026-11-30 02:00 UTC): 0-511: agreement 90.0% of 40 pairs, "
        "cloud vs itself 95.0% (80.0%–99.0%) of 20 repeat pairs; 512+: agreement 60.0% of "
        "10 pairs, cloud vs itself: no repeat pairs."
    )
