"""Corrections (a reviewer's newer label on an item they labelled): what they may change,
how often, and what they leave behind."""

from __future__ import annotations

from datetime import timedelta

from controlplane.review.accuracy import Drawn, Vote, window_accuracy
from tests.review.queuedata import T0


def test_only_each_reviewers_newest_vote_names_failure_classes() -> None:
    item = Drawn(1, T0, "128-511", "pair", "done", "edge", 0.5)
    labels = [
        Vote(i + 1, "rev1", "cloud_correct", f"spam{i}", None, T0 + timedelta(seconds=i))
        for i in range(5)
    ]
    labels.append(Vote(6, "rev1", "both_correct", None, None, T0 + timedelta(seconds=9)))
    labels.append(Vote(7, "rev2", "both_correct", "kept", None, T0 + timedelta(seconds=9)))
    found = window_accuracy([item], {1: labels})
    assert set(found.failure_classes) == {"kept"}
