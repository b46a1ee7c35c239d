"""What changed between two config versions: every differing leaf by dotted path."""

from __future__ import annotations

from controlplane.catalog.versions import ABSENT, config_diff


def test_only_the_leaves_that_differ_are_listed_by_path() -> None:
    before = {
        "task": "t",
        "review": {"quota_per_window": 4, "reviewers_per_item": 1},
        "rollback": {"rules": [{"metric": "agreement", "threshold": 0.9}]},
        "length_buckets": [128, 512],
    }
    after = {
        "task": "t",
        "review": {"quota_per_window": 8, "reviewers_per_item": 1},
        "rollback": {"rules": [{"metric": "agreement", "threshold": 0.85}]},
        "length_buckets": [128, 512, 2048],
        "max_input_tokens": 2047,
    }
    assert config_diff(before, after) == [
        {"path": "length_buckets", "before": [128, 512], "after": [128, 512, 2048]},
        {"path": "max_input_tokens", "before": ABSENT, "after": 2047},
        {"path": "review.quota_per_window", "before": 4, "after": 8},
        {"path": "rollback.rules[0].threshold", "before": 0.9, "after": 0.85},
    ]


def test_the_same_config_has_no_changes_and_a_type_change_is_one() -> None:
    config = {"a": {"b": [1, {"c": None}]}}
    assert config_diff(config, config) == []
    assert config_diff({"a": 1}, {"a": "1"}) == [{"path": "a", "before": 1, "after": "1"}]
    assert config_diff({"a": 1}, {}) == [{"path": "a", "before": 1, "after": ABSENT}]
