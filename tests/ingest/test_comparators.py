"""The comparators, table-driven: what counts as equal, as a conflict, as invalid."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controlplane.ingest.comparators import REGISTRY, compare

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
