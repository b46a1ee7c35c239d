"""Comparator calibration (pure) against hand-computed values: conflict precision per
check, the weighted miss rate of agreement."""

from __future__ import annotations

import pytest

from controlplane.metrics.stats import wilson
from controlplane.review.calibration import Judged, calibrate, checks


def tc(outcome: str, failed: list[str] | None, resolved: str, p: float) -> Judged:
    diff = {"failed": failed, **{name: {} for name in failed}} if failed else None
    return Judged("text_conservation", outcome, diff, resolved, p)


def test_checks_named_by_text_conservation_else_the_comparator() -> None:
    assert checks("text_conservation", {"failed": ["numbers", "spans"]}) == ["numbers", "spans"]
    assert checks("text_conservation", {"cloud": "not a non-empty text"}) == ["text_conservation"]
    assert checks("label", {"edge": "refund", "cloud": "exchange"}) == ["label"]


def test_precision_per_check_and_weighted_miss_rate_by_hand() -> None:
    judged = [
        tc("conflict", ["numbers"], "both_correct", 1.0),  # not real
        tc("conflict", ["numbers", "spans"], "cloud_correct", 1.0),  # real
        tc("conflict", ["spans"], "edge_correct", 0.5),  # real, weight 2
        tc("agree", None, "both_correct", 0.1),  # weight 10, no miss
        tc("agree", None, "cloud_correct", 0.05),  # weight 20, a miss
        tc("agree", None, "unclear", 0.05),  # left out
        Judged("label", "conflict", {"edge": "a", "cloud": "b"}, "both_wrong", 1.0),
    ]
    label, text = calibrate(judged)
    assert label["comparator"] == "label"
    assert label["conflict_precision"]["estimate"] == 1.0
    assert label["agree_miss_rate"]["n"] == 0 and label["agree_miss_rate"]["estimate"] is None

    precision = text["conflict_precision"]
    assert precision["n"] == 3
    assert precision["estimate"] == pytest.approx(3 / 4)
    assert precision["n_effective"] == pytest.approx(16 / 6)
    interval = wilson(3 / 4 * 16 / 6, 16 / 6)
    assert interval is not None
    assert (precision["low"], precision["high"]) == pytest.approx(interval)
    by_check = {c["check"]: c["conflict_precision"] for c in text["checks"]}
    assert by_check["numbers"]["estimate"] == pytest.approx(0.5)
    assert by_check["spans"]["estimate"] == pytest.approx(1.0)
    assert by_check["spans"]["n"] == 2

    miss = text["agree_miss_rate"]
    assert miss["n"] == 2
    assert miss["estimate"] == pytest.approx(20 / 30)
    assert miss["n_effective"] == pytest.approx(900 / 500)
