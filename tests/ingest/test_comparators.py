"""The comparators, table-driven: what counts as equal, as a conflict, as invalid."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controlplane.compare.comparators import (
    MAX_CHARS,
    MAX_DEPTH,
    REGISTRY,
    canonical,
    compare,
)

# Runs once with each reader (the text_reader parameter, tests/conftest.py).
pytestmark = pytest.mark.text_reader

LABELS = {"kind": "label", "labels": ["refund", "exchange", "complaint"]}
FREE_LABELS = {"kind": "label"}
EXACT = {"kind": "exact"}
INVOICE = {
    "kind": "json_fields",
    "fields": {"amount": "number", "currency": "string", "lines": "array", "paid": "boolean"},
    "required": ["amount", "currency"],
}

CASES: list[tuple[str, dict[str, Any], Any, Any, str]] = [
    # label
    ("labels differing only in case and spaces", LABELS, "  Refund ", "refund", "agree"),
    ("inner whitespace collapses", FREE_LABELS, "gift  card", "Gift Card", "agree"),
    ("different labels", LABELS, "refund", "exchange", "conflict"),
    ("edge label outside the list", LABELS, "cancel", "refund", "invalid"),
    ("edge label not a string", LABELS, 3, "refund", "invalid"),
    ("edge label empty", FREE_LABELS, "   ", "refund", "invalid"),
    ("cloud label outside the list is not agreement", LABELS, "refund", "cancel", "conflict"),
    (
        "without a list any non-empty string is a label",
        FREE_LABELS,
        "whatever",
        "Whatever",
        "agree",
    ),
    # exact
    ("reordered JSON keys", EXACT, {"a": 1, "b": [1, 2]}, {"b": [1, 2], "a": 1}, "agree"),
    ("1 and 1.0 are the same number", EXACT, {"n": 1}, {"n": 1.0}, "agree"),
    ("list order matters", EXACT, [1, 2], [2, 1], "conflict"),
    ("strings differ", EXACT, "a", "b", "conflict"),
    # json_fields
    (
        "reordered keys",
        INVOICE,
        {"currency": "EUR", "amount": 10},
        {"amount": 10, "currency": "EUR"},
        "agree",
    ),
    (
        "1 vs 1.0 in a number field",
        INVOICE,
        {"amount": 1, "currency": "EUR"},
        {"amount": 1.0, "currency": "EUR"},
        "agree",
    ),
    (
        "JSON text is parsed",
        INVOICE,
        '{"amount": 5, "currency": "USD"}',
        {"amount": 5.0, "currency": "USD"},
        "agree",
    ),
    (
        "fields not in the schema are ignored",
        INVOICE,
        {"amount": 5, "currency": "USD", "x": 1},
        {"amount": 5, "currency": "USD", "x": 2},
        "agree",
    ),
    (
        "a different amount",
        INVOICE,
        {"amount": 5, "currency": "USD"},
        {"amount": 6, "currency": "USD"},
        "conflict",
    ),
    (
        "an optional field only one side has",
        INVOICE,
        {"amount": 5, "currency": "USD", "paid": True},
        {"amount": 5, "currency": "USD"},
        "conflict",
    ),
    (
        "a missing required field",
        INVOICE,
        {"currency": "USD"},
        {"amount": 5, "currency": "USD"},
        "invalid",
    ),
    (
        "a wrong type",
        INVOICE,
        {"amount": "5", "currency": "USD"},
        {"amount": 5, "currency": "USD"},
        "invalid",
    ),
    (
        "a boolean is not a number",
        INVOICE,
        {"amount": True, "currency": "USD"},
        {"amount": 1, "currency": "USD"},
        "invalid",
    ),
    ("not JSON at all", INVOICE, "the amount is 5", {"amount": 5, "currency": "USD"}, "invalid"),
    (
        "a broken reference is a conflict, never agreement",
        INVOICE,
        {"amount": 5, "currency": "USD"},
        {"currency": "USD"},
        "conflict",
    ),
]


@pytest.mark.parametrize(
    ("why", "spec", "edge", "cloud", "expected"), CASES, ids=[c[0] for c in CASES]
)
def test_comparator_outcome(
    why: str, spec: dict[str, Any], edge: Any, cloud: Any, expected: str
) -> None:
    comparison = compare(spec, edge, cloud)
    assert comparison.outcome == expected, comparison.diff
    assert comparison.version == REGISTRY[spec["kind"]].version
    if expected == "agree":
        assert comparison.diff is None
    else:
        assert comparison.diff, "a disagreement must say what differed"


def test_label_diff_names_both_labels() -> None:
    assert compare(LABELS, "Refund", "exchange").diff == {
        "label": {"edge": "refund", "cloud": "exchange"}
    }


def test_json_fields_diff_names_the_field() -> None:
    diff = compare(INVOICE, {"amount": 5, "currency": "USD"}, {"amount": 6, "currency": "USD"}).diff
    assert diff == {"fields": {"amount": {"edge": 5, "cloud": 6}}}


def test_invalid_diff_names_the_missing_field() -> None:
    diff = compare(INVOICE, {"currency": "USD"}, {"amount": 5, "currency": "USD"}).diff
    assert diff == {"edge": ["missing required field 'amount'"]}


def test_exact_diff_names_the_paths() -> None:
    diff = compare(EXACT, {"a": {"b": 1, "c": 2}}, {"a": {"b": 1, "c": 3}, "d": 0}).diff
    assert diff == {"paths": ["a.c", "d"]}


def test_registry_holds_the_four_comparators() -> None:
    assert set(REGISTRY) == {"label", "exact", "json_fields", "text_conservation"}


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@given(json_values)
def test_exact_agrees_with_itself(value: Any) -> None:
    assert compare(EXACT, value, value).outcome == "agree"


@given(
    st.fixed_dictionaries(
        {
            "amount": st.floats(0, 10**6, allow_nan=False),
            "currency": st.text(min_size=1, max_size=5),
        }
    )
)
def test_json_fields_agrees_with_itself_and_with_key_order(value: dict[str, Any]) -> None:
    assert compare(INVOICE, value, value).outcome == "agree"
    assert compare(INVOICE, dict(reversed(list(value.items()))), value).outcome == "agree"


@given(
    st.sampled_from(["refund", "exchange", "complaint"]),
    st.sampled_from(["", " ", "  "]),
    st.booleans(),
)
def test_label_ignores_case_and_outer_space(label: str, pad: str, upper: bool) -> None:
    shown = pad + (label.upper() if upper else label) + pad
    assert compare(LABELS, shown, label).outcome == "agree"


# --- bounds: what is read at all ------------------------------------------------------

TEXT = {"kind": "text_conservation", "length_ratio": [0.7, 1.4]}


@pytest.mark.parametrize("spec", [LABELS, EXACT, INVOICE, TEXT], ids=lambda s: s["kind"])
def test_an_output_longer_than_max_chars_is_not_compared(spec: dict[str, Any]) -> None:
    long = "refund " * 15  # 105 characters
    for edge, cloud, lengths in ((long, "refund", (105, 6)), ({"amount": 1}, long, (None, 105))):
        comparison = compare(spec, edge, cloud, max_chars=100)
        assert comparison.outcome is None
        assert comparison.diff == {
            "too_long": {"edge": lengths[0], "cloud": lengths[1], "max_chars": 100}
        }
        assert comparison.version == REGISTRY[spec["kind"]].version


def test_max_chars_is_inclusive_and_defaults_to_32000() -> None:
    assert MAX_CHARS == 32_000
    text = "Refund sent. " * 2_461 + "Thanks!"  # 32,000 characters
    assert len(text) == MAX_CHARS
    assert compare(TEXT, text, text).outcome == "agree"
    assert compare(TEXT, text + "!", text).outcome is None
    assert compare(TEXT, text + "!", text, max_chars=40_000).outcome == "agree"
    assert compare(LABELS, "refund", "refund", max_chars=6).outcome == "agree"
    assert compare(LABELS, "refund", "refund", max_chars=5).outcome is None


def _nested(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def test_exact_refuses_json_deeper_than_max_depth_without_recursion_error() -> None:
    assert MAX_DEPTH == 64
    deep = _nested(100_000)
    assert compare(EXACT, deep, 1).outcome == "invalid"
    assert compare(EXACT, deep, 1).diff == {"edge": "JSON nested deeper than 64 levels"}
    assert compare(EXACT, 1, deep).outcome == "conflict"
    assert compare(EXACT, 1, deep).diff == {"cloud": "JSON nested deeper than 64 levels"}
    assert compare(EXACT, _nested(64), _nested(64)).outcome == "agree"
    assert compare(EXACT, _nested(65), _nested(65)).outcome == "invalid"
    with pytest.raises(ValueError, match="deeper than 64 levels"):
        canonical(_nested(65))


def test_json_fields_reads_deeply_nested_json_text_as_invalid_not_recursion_error() -> None:
    deep_text = '{"amount": 1, "currency": "USD", "lines": ' + "[" * 100_000 + "]" * 100_000 + "}"
    good = {"amount": 1, "currency": "USD", "lines": []}
    edge = compare(INVOICE, deep_text, good, max_chars=len(deep_text))
    assert (edge.outcome, edge.diff) == ("invalid", {"edge": ["JSON nested deeper than 64 levels"]})
    cloud = compare(INVOICE, good, deep_text, max_chars=len(deep_text))
    assert (cloud.outcome, cloud.diff) == (
        "conflict",
        {"cloud": ["JSON nested deeper than 64 levels"]},
    )
    # A parsed object nested as deep, and the same depth inside JSON text's strings (not
    # nesting at all), the boundary, and an unclosed string full of escaped quotes.
    deep_object = {"amount": 1, "currency": "USD", "lines": _nested(100)}
    assert compare(INVOICE, deep_object, good).outcome == "invalid"
    in_a_string = '{"amount": 1, "currency": "' + "[" * 1_000 + '", "lines": []}'
    assert compare(INVOICE, in_a_string, in_a_string).outcome == "agree"
    at_the_bound = '{"amount": 1, "currency": "USD", "lines": ' + "[" * 63 + "]" * 63 + "}"
    assert compare(INVOICE, at_the_bound, at_the_bound).outcome == "agree"
    unclosed = '{"amount": "' + '\\"[' * 20_000
    comparison = compare(INVOICE, unclosed, good, max_chars=10**6)
    assert comparison.outcome == "invalid"
    assert comparison.diff is not None
    assert comparison.diff["edge"][0].startswith('not a JSON object: "{\\"amount\\": ')


def test_counts_compare_as_counters_do() -> None:
    """Readings' counts are compared as Counters (a missing key is a zero), through the
    dict fast path when they are equal."""
    from collections import Counter

    from controlplane.compare.comparators import _same_counts

    assert _same_counts(Counter({"1": 2}), Counter({"1": 2}))
    assert _same_counts(Counter({"1": 2}), Counter({"1": 2, "3": 0}))
    assert not _same_counts(Counter({"1": 2}), Counter({"1": 1}))
    assert not _same_counts(Counter({"1": 2}), Counter({"1": 2, "3": 1}))
