"""A `failure_class` rollback rule names the class it judges (`class:`), only such a rule may
name one, the name is short and plain, and the stored config keeps it under `class`."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.catalog.schemas import ConfigError, config_document, parse_config

BASE: dict[str, Any] = {"task": "classy", "comparator": {"kind": "exact"}}
FC_RULE: dict[str, Any] = {"metric": "failure_class", "op": "<=", "threshold": 0.05}


def _errors(rule: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_config({**BASE, "rollback": {"rules": [rule]}})
    return caught.value.errors


def test_a_failure_class_rule_without_class_is_refused_naming_it() -> None:
    errors = _errors(FC_RULE)
    assert len(errors) == 1, errors
    assert errors[0].startswith("rollback.rules.0"), errors
    assert "failure_class rule needs `class`" in errors[0]


def test_class_on_another_metric_is_refused() -> None:
    errors = _errors({"metric": "agreement", "op": ">=", "threshold": 0.9, "class": "amount"})
    assert len(errors) == 1, errors
    assert errors[0].startswith("rollback.rules.0"), errors
    assert "only a failure_class rule names a class, not agreement" in errors[0]


@pytest.mark.parametrize(
    "name",
    ["Amount", "wrong language", "a" * 65, "_amount", "9lives", ""],
    ids=["uppercase", "space", "65-chars", "leading-underscore", "leading-digit", "empty"],
)
def test_a_class_name_off_the_pattern_is_refused(name: str) -> None:
    errors = _errors({**FC_RULE, "class": name})
    assert len(errors) == 1, errors
    assert errors[0].startswith("rollback.rules.0"), errors
    assert "class: must start with a lowercase letter" in errors[0]


@pytest.mark.parametrize("name", ["amount", "wrong_language", "a.b-c_9", "a" * 64])
def test_a_valid_class_round_trips_under_class(name: str) -> None:
    config = parse_config({**BASE, "rollback": {"rules": [{**FC_RULE, "class": name}]}})
    rule = config.rollback.rules[0]
    assert rule.failure_class == name
    assert config.rollback.resolved_rules()[0].failure_class == name
    document = config_document(config)
    stored = document["rollback"]["rules"][0]
    assert stored["class"] == name
    assert "failure_class" not in stored
    # What is stored parses back to the same config.
    again = parse_config(document)
    assert again == config
    assert config_document(again) == document
