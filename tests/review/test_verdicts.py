"""Verdicts that cannot contradict the comparator (labels.contradiction, pure): under an
exact comparator two answers it reads as one are right or wrong together and two it reads
as different are never both right; an answer it calls invalid is never right; a text
rewrite may differ from another and both be right."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controlplane.compare.comparators import normalise_label
from controlplane.review.labels import PAIR_VERDICTS, contradiction, wrong_correction

LABEL = {"kind": "label", "labels": ["refund", "exchange", "complaint", "inquiry"]}
EXACT = {"kind": "exact"}
FIELDS = {
    "kind": "json_fields",
    "fields": {"amount": "number", "currency": "string", "note": "string"},
    "required": ["amount", "currency"],
}
TEXT = {"kind": "text_conservation"}
SIDES = re.compile(r"\b(edge|cloud|served|decision)\b", re.IGNORECASE)
INVOICE = {"amount": 12.5, "currency": "EUR", "note": "Paid in full."}

# (spec, A, B, verdict, what the refusal says; None: it stands)
CASES: list[tuple[dict[str, Any], Any, Any, str, str | None]] = [
    # The two found on main: "Both right" on two labels, "A is right" on two equal ones.
    (LABEL, "inquiry", "refund", "both_correct", 'A reads "inquiry", B "refund"'),
    (LABEL, "refund", "refund", "a_correct", 'both read "refund"'),
    (LABEL, "refund", "refund", "b_correct", 'both read "refund"'),
    # Equal as the comparator reads them: case and spaces are not a difference.
    (LABEL, " Refund ", "refund", "b_correct", 'both read "refund"'),
    (LABEL, " Refund ", "refund", "both_correct", None),
    (LABEL, "inquiry", "refund", "a_correct", None),
    (LABEL, "inquiry", "refund", "b_correct", None),
    # An invalid answer is not equal to a valid one, and is never right.
    (LABEL, "warranty", "refund", "b_correct", None),
    (LABEL, "warranty", "refund", "a_correct", "A is not an answer"),
    (LABEL, "refund", "warranty", "both_correct", "B is not an answer"),
    (LABEL, "warranty", "warranty", "a_correct", "A is not an answer"),
    # Canonical JSON: key order and 1.0 against 1 are no difference.
    (EXACT, {"b": [1], "a": 1.0}, {"a": 1, "b": [1]}, "a_correct", "the same JSON value"),
    (EXACT, {"b": [1], "a": 1.0}, {"a": 1, "b": [1]}, "both_correct", None),
    (EXACT, {"a": 1, "b": [1]}, {"a": 1, "b": [2]}, "both_correct", "they differ at b[0]"),
    (EXACT, "yes", "no", "both_correct", "they differ as a whole"),
    (EXACT, "yes", "no", "b_correct", None),
    # json_fields reads its declared fields only (strings with spaces folded), and JSON
    # text as the object it holds.
    (FIELDS, {**INVOICE, "seller": "X"}, json.dumps(INVOICE), "b_correct", "it compares amount"),
    (FIELDS, {**INVOICE, "note": " Paid  in full. "}, INVOICE, "a_correct", "same values"),
    (FIELDS, {**INVOICE, "seller": "X"}, INVOICE, "both_correct", None),
    (FIELDS, {**INVOICE, "amount": 125}, INVOICE, "both_correct", "they differ on amount"),
    (FIELDS, {**INVOICE, "amount": 125}, INVOICE, "a_correct", None),
    (FIELDS, {"amount": 12.5}, INVOICE, "both_correct", "missing required field 'currency'"),
    (FIELDS, {"amount": 12.5}, INVOICE, "b_correct", None),
    (FIELDS, "not json", INVOICE, "a_correct", "not a JSON object"),
    # Text rewrites: two valid ones may both be right, and one may be right alone.
    (TEXT, "Your refund was sent today.", "We sent your refund today.", "both_correct", None),
    (TEXT, "Your refund was sent today.", "We sent your refund today.", "a_correct", None),
    (TEXT, "Your refund was sent today.", "Your refund was sent today.", "b_correct", None),
    (TEXT, "  ", "We sent your refund today.", "both_correct", "A is not an answer"),
]


@pytest.mark.parametrize(("spec", "a", "b", "verdict", "refused"), CASES)
def test_a_verdict_stands_or_is_refused_with_its_reason(
    spec: dict[str, Any], a: Any, b: Any, verdict: str, refused: str | None
) -> None:
    reason = contradiction(verdict, spec, a, b)
    if refused is None:
        assert reason is None
        return
    assert reason is not None and reason.startswith(f"verdict: {verdict} calls ")
    assert refused in reason, reason
    assert f"this task's {spec['kind']} comparator" in reason
    # Blind: the reason speaks of A and B only.
    assert not SIDES.search(reason), reason


@pytest.mark.parametrize("verdict", ["both_wrong", "unclear", "correct", "wrong"])
def test_a_verdict_that_calls_no_answer_right_always_stands(verdict: str) -> None:
    for spec, a, b, *_ in CASES:
        assert contradiction(verdict, spec, a, b) is None


def test_without_a_comparator_or_on_answers_too_long_to_compare_nothing_is_refused() -> None:
    assert contradiction("both_correct", None, "inquiry", "refund") is None
    long = "refund" + " " * 300_000
    assert contradiction("a_correct", LABEL, long, long) is None


def test_the_differences_named_are_bounded() -> None:
    a = {f"k{i}": i for i in range(12)}
    b = {f"k{i}": -i - 1 for i in range(12)}
    reason = contradiction("both_correct", EXACT, a, b)
    assert reason is not None and "and 7 more" in reason


WORDS = st.sampled_from(["refund", "Refund", " REFUND ", "inquiry", "Inquiry\t", "exchange"])


@given(a=WORDS, b=WORDS, verdict=st.sampled_from(PAIR_VERDICTS))
def test_under_a_label_comparator_equal_answers_are_right_or_wrong_together(
    a: str, b: str, verdict: str
) -> None:
    same = normalise_label(a) == normalise_label(b)
    refused = contradiction(verdict, LABEL, a, b) is not None
    if verdict == "both_correct":
        assert refused is not same
    elif verdict in ("a_correct", "b_correct"):
        assert refused is same
    else:
        assert not refused


# (verdict, spec, correction, A, B, (the answer it equals, the verdict to choose); None: it
# stands)
WRONG_CASES: list[tuple[str, dict[str, Any], Any, Any, Any, tuple[str, str] | None]] = [
    ("both_wrong", LABEL, " Refund", "refund", "exchange", ("A", "a_correct")),
    ("both_wrong", LABEL, "EXCHANGE", "refund", "exchange", ("B", "b_correct")),
    ("both_wrong", LABEL, "refund", "refund", " refund", ("A and B", "both_correct")),
    ("both_wrong", LABEL, "inquiry", "refund", "exchange", None),
    ("wrong", LABEL, "Exchange ", "exchange", None, ("the answer shown", "correct")),
    ("wrong", LABEL, "refund", "exchange", None, None),
    ("both_wrong", EXACT, {"a": 1.0}, {"a": 1}, {"a": 2}, ("A", "a_correct")),
    ("both_wrong", FIELDS, {**INVOICE, "seller": "X"}, INVOICE, "n/a", ("A", "a_correct")),
    # Verdicts that call nothing wrong, and text rewrites (not an exact comparator).
    ("unclear", LABEL, "refund", "refund", "exchange", None),
    ("both_wrong", TEXT, "Your refund was sent.", "Your refund was sent.", "Sent.", None),
]


@pytest.mark.parametrize(("verdict", "spec", "corrected", "a", "b", "refused"), WRONG_CASES)
def test_a_correction_may_not_be_an_answer_its_verdict_calls_wrong(
    verdict: str,
    spec: dict[str, Any],
    corrected: Any,
    a: Any,
    b: Any,
    refused: tuple[str, str] | None,
) -> None:
    reason = wrong_correction(verdict, spec, corrected, a, b)
    if refused is None:
        assert reason is None
        return
    equals, instead = refused
    assert reason is not None, (verdict, corrected)
    assert reason.startswith(f"corrected: the same answer as {equals} to this task's "), reason
    assert f"which {verdict} calls wrong; choose {instead}," in reason
    assert not SIDES.search(reason), reason
