"""The span rules (`net_savings`, `input_shift`) and itemised fixed costs in a task config:
each refusal names the field and the reason; a span reads as seconds or a duration; the
resolved rules carry their span and net_savings its 95% interval; the default rules hold
input_shift and leave net_savings to the team that knows its costs."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.catalog.schemas import (
    DEFAULT_RULES,
    ConfigError,
    ResolvedRule,
    config_document,
    parse_config,
)

BASE: dict[str, Any] = {"task": "spanned", "comparator": {"kind": "exact"}}
NET: dict[str, Any] = {"metric": "net_savings", "op": ">=", "threshold": 0}
SHIFT: dict[str, Any] = {"metric": "input_shift", "op": "<=", "threshold": 0.25}
AGREEMENT: dict[str, Any] = {"metric": "agreement", "op": ">=", "threshold": 0.9}


def _errors(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_config({**BASE, **raw})
    return caught.value.errors


def _rule_errors(rule: dict[str, Any], **config: Any) -> list[str]:
    return _errors({"rollback": {"rules": [rule]}, **config})


def _resolved(rule: dict[str, Any], *, window: int = 300, **rollback: Any) -> ResolvedRule:
    """The one rule of a config, resolved; `rollback` sets policy fields beside it."""
    parsed = parse_config(
        {**BASE, "window_seconds": window, "rollback": {"rules": [rule], **rollback}}
    )
    [resolved] = parsed.rollback.resolved_rules()
    return resolved


# (the rule, what the error must say): one error each, at rollback.rules.0.
REFUSED_RULES: list[tuple[dict[str, Any], str]] = [
    # threshold ranges per metric
    ({**AGREEMENT, "threshold": 1.5}, "threshold (1.5) of the agreement rule is a rate: between 0 and 1"),
    ({**AGREEMENT, "threshold": -0.1}, "threshold (-0.1) of the agreement rule is a rate"),
    ({**SHIFT, "threshold": 0}, "threshold (0) of an input_shift rule is a population stability index: above 0 and at most 10"),
    ({**SHIFT, "threshold": 10.5}, "threshold (10.5) of an input_shift rule is a population stability index"),
    ({**NET, "threshold": 2e12}, "threshold (2e+12) of a net_savings rule is money over the span: at most 1e+12 either way"),
    ({**NET, "threshold": -2e12}, "threshold (-2e+12) of a net_savings rule is money over the span"),
    # op per metric
    ({**NET, "op": "<="}, "op of a net_savings rule must be '>=': savings must stay at or above the threshold"),
    ({**SHIFT, "op": ">="}, "op of an input_shift rule must be '<=': the shift must stay at or below the threshold"),
    # scope
    ({**NET, "scope": "per_bucket"}, "scope: a net_savings rule judges the task as a whole, never per bucket"),
    ({**SHIFT, "scope": "per_bucket"}, "scope: an input_shift rule judges the task as a whole"),
    # what a span rule has no use for
    ({**NET, "detector": "cusum"}, "detector: does not apply to a net_savings rule"),
    ({**SHIFT, "detector": "consecutive"}, "detector: does not apply to an input_shift rule"),
    ({**NET, "critical": 0.5}, "critical: does not apply to a net_savings rule"),
    ({**SHIFT, "critical": 0.5}, "critical: does not apply to an input_shift rule"),
    ({**NET, "min_effect": 0.1}, "min_effect: does not apply to a net_savings rule"),
    ({**SHIFT, "min_effect": 0.1}, "min_effect: does not apply to an input_shift rule"),
    ({**NET, "h": 4}, "h: does not apply to a net_savings rule"),
    ({**SHIFT, "h": 4}, "h: does not apply to an input_shift rule"),
    ({**NET, "cap": 1}, "cap: does not apply to a net_savings rule"),
    ({**SHIFT, "cap": 1}, "cap: does not apply to an input_shift rule"),
    ({**SHIFT, "confidence": 0.9}, "confidence: does not apply to an input_shift rule"),
    # net_savings' confidence is its interval's level
    ({**NET, "confidence": "point"}, "confidence of a net_savings rule is its interval's level: at least 0.5 and at most 0.999999"),
    ({**NET, "confidence": 0.4}, "confidence of a net_savings rule is its interval's level"),
    ({**NET, "confidence": 1.0}, "confidence of a net_savings rule is its interval's level"),
    # a span only where a rule judges one
    ({**AGREEMENT, "span": "2h"}, "span: only net_savings and input_shift rules judge a span, not agreement"),
]  # fmt: skip


@pytest.mark.parametrize(("rule", "says"), REFUSED_RULES)
def test_a_span_rule_out_of_shape_is_refused_naming_the_field_and_why(
    rule: dict[str, Any], says: str
) -> None:
    errors = _rule_errors(rule)
    assert len(errors) == 1, errors
    assert errors[0].startswith("rollback.rules.0"), errors
    assert says in errors[0], errors


@pytest.mark.parametrize(
    "span",
    ["1w", "1.5h", "90 minutes", "h", "", "-5m", 90.5, True, [7200], {"h": 2}],
    ids=[
        "week",
        "fraction",
        "word",
        "unit-only",
        "empty",
        "negative",
        "float",
        "bool",
        "list",
        "map",
    ],
)
def test_a_span_that_is_neither_seconds_nor_a_duration_is_refused(span: Any) -> None:
    errors = _rule_errors({**SHIFT, "span": span})
    assert len(errors) == 1, errors
    assert errors[0].startswith(
        "rollback.rules.0.span: not a span: whole seconds, or a duration such as 90m, 24h or 2d"
    ), errors


@pytest.mark.parametrize("span", [-5, 0, 59, "59s", "31d", 30 * 86400 + 1])
def test_a_span_outside_a_minute_to_30_days_is_refused(span: Any) -> None:
    # A window of a minute, so that only the span's own bounds are in play.
    errors = _rule_errors({**SHIFT, "span": span}, window_seconds=60)
    assert len(errors) == 1, errors
    assert errors[0].startswith(
        "rollback.rules.0.span: must be between 60 seconds and 30 days (2592000 seconds)"
    ), errors


@pytest.mark.parametrize(
    ("span", "seconds", "window"),
    [
        (5400, 5400, 300),
        ("5400", 5400, 300),
        (5400.0, 5400, 300),
        ("120s", 120, 60),
        ("90m", 5400, 300),
        ("24h", 86400, 300),
        ("2d", 172800, 300),
        (" 3 h ", 3 * 3600, 300),
        (60, 60, 30),
        ("30d", 30 * 86400, 3600),
    ],
)
def test_a_span_reads_as_seconds_or_a_duration(span: Any, seconds: int, window: int) -> None:
    assert _resolved({**NET, "span": span}, window=window).span_seconds == seconds


def test_a_span_shorter_than_one_window_is_refused_naming_both() -> None:
    errors = _rule_errors({**SHIFT, "span": "30m"}, window_seconds=3600)
    assert errors == [
        "(config): rollback.rules.0.span: 1800 s is shorter than one window (window_seconds 3600)"
    ]
    # One window exactly is a span.
    assert _resolved({**SHIFT, "span": "1h"}, window=3600).span_seconds == 3600


def test_a_span_holding_more_than_2016_windows_is_refused_naming_the_longest() -> None:
    # 2016 windows of 300 s = 604,800 s = 7 days: the longest span at the default windows.
    assert _resolved({**NET, "span": "7d"}).span_seconds == 2016 * 300
    errors = _rule_errors({**NET, "span": 7 * 86400 + 1})
    assert errors == [
        "(config): rollback.rules.0.span: 604801 s is more than 2016 windows of 300 s; "
        "at most 604800 s with window_seconds 300 (or a longer window_seconds)"
    ]
    # The index names the rule among several; a longer window takes the same span.
    errors = _errors({"rollback": {"rules": [AGREEMENT, SHIFT, {**NET, "span": "8d"}]}})
    assert len(errors) == 1 and errors[0].startswith("(config): rollback.rules.2.span:"), errors
    assert _resolved({**NET, "span": "8d"}, window=600).span_seconds == 8 * 86400


def test_spans_default_to_a_day_for_net_savings_and_two_hours_for_input_shift() -> None:
    assert _resolved(NET).span_seconds == 86400
    assert _resolved(SHIFT).span_seconds == 2 * 3600
    # A rate rule judges windows, not a span.
    assert _resolved(AGREEMENT).span_seconds is None


def test_net_savings_reads_a_95_percent_interval_unless_it_sets_its_own() -> None:
    # The policy's confidence is a rate bound's; net_savings keeps its own default.
    net = _resolved(NET, confidence=0.9)
    assert net.confidence == 0.95
    assert _resolved(AGREEMENT, confidence=0.9).confidence == 0.9
    assert _resolved({**NET, "confidence": 0.8}).confidence == 0.8
    assert _resolved({**NET, "confidence": 0.5}).confidence == 0.5
    assert _resolved({**NET, "confidence": 0.99}).confidence == 0.99


def test_span_rules_keep_min_samples_mode_and_thresholds_at_their_bounds() -> None:
    shift = _resolved({**SHIFT, "threshold": 10, "min_samples": 500, "mode": "notify"})
    assert (shift.threshold, shift.min_samples, shift.mode) == (10, 500, "notify")
    # net_savings' threshold is money: a loss the team accepts over the span is negative.
    assert _resolved({**NET, "threshold": -1e12}).threshold == -1e12
    assert _resolved({**NET, "threshold": 25.5, "mode": "off"}).threshold == 25.5


def test_the_default_rules_hold_input_shift_and_not_net_savings() -> None:
    rules = parse_config(BASE).rollback.resolved_rules()
    metrics = [r.metric for r in rules]
    assert "net_savings" not in metrics
    [shift] = [r for r in rules if r.metric == "input_shift"]
    assert (shift.op, shift.threshold, shift.span_seconds, shift.mode) == (
        "<=",
        0.25,
        7200,
        "auto_rollback",
    )
    assert [r.metric for r in DEFAULT_RULES] == metrics


# --- fixed costs -----------------------------------------------------------------------


def test_fixed_costs_fill_fixed_cost_per_day_when_it_is_left_out() -> None:
    config = parse_config({**BASE, "fixed_costs": {"routing": 10, "gpu": 25, "ops": 5}})
    assert config.fixed_cost_per_day == 10 + 25 + 5
    # The stored document keeps both: the items and their sum.
    document = config_document(config)
    assert document["fixed_costs"] == {"routing": 10.0, "gpu": 25.0, "ops": 5.0}
    assert document["fixed_cost_per_day"] == 40.0
    # ... and parses back to the same config.
    assert parse_config(document) == config


def test_fixed_costs_may_repeat_their_sum_and_are_absent_by_default() -> None:
    both = parse_config(
        {**BASE, "fixed_costs": {"gpu": 0.1, "ops": 0.2}, "fixed_cost_per_day": 0.3}
    )
    assert both.fixed_cost_per_day == 0.3  # 0.1 + 0.2 is 0.30000000000000004
    plain = parse_config(BASE)
    assert plain.fixed_costs is None
    assert plain.fixed_cost_per_day == 40.0


def test_fixed_costs_that_do_not_add_up_to_fixed_cost_per_day_are_refused() -> None:
    errors = _errors({"fixed_costs": {"gpu": 25, "ops": 5}, "fixed_cost_per_day": 40})
    assert errors == [
        "(config): fixed_cost_per_day (40) must equal the sum of fixed_costs (30), or be left out"
    ]


@pytest.mark.parametrize("name", ["GPU", "gpu cost", "_gpu", "9gpu", "g" * 65, ""], ids=repr)
def test_a_fixed_cost_name_off_the_pattern_is_refused(name: str) -> None:
    errors = _errors({"fixed_costs": {"gpu": 1, name: 2}})
    assert len(errors) == 1, errors
    assert errors[0].startswith("(config): fixed_costs: "), errors
    assert "is not a cost name: a lowercase letter, then a-z, 0-9" in errors[0], errors


@pytest.mark.parametrize(
    ("cost", "says"),
    [
        (-1, "greater than or equal to 0"),
        (2_000_000, "less than or equal to 1000000"),
        ("ten", "a valid number"),
        (float("nan"), "finite number"),
    ],
    ids=["negative", "past-a-million", "text", "nan"],
)
def test_a_bad_fixed_cost_is_named_alone(cost: Any, says: str) -> None:
    # Named once, as the cost; never also as a fixed_cost_per_day nobody wrote.
    errors = _errors({"fixed_costs": {"ops": 5, "gpu": cost}})
    assert len(errors) == 1, errors
    assert errors[0].startswith("fixed_costs.gpu: "), errors
    assert says in errors[0], errors
