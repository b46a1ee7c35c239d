"""Fingerprints of cloud outputs (controlplane.compare.fingerprint): a free repeat pair scored
from two prints says what the comparator says of the two outputs; input hashes equal for
inputs that differ only in spacing or compatibility forms."""

from __future__ import annotations

import hmac
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controlplane.compare import fingerprint as fingerprints
from controlplane.compare.comparators import Comparison, compare
from controlplane.compare.fingerprint import (
    compare_prints,
    fingerprint,
    input_hash,
    repeat_outcome,
)

# Runs once with each reader (the text_reader parameter, tests/conftest.py).
pytestmark = pytest.mark.text_reader

KEY = b"k" * 32
LABELS = {"kind": "label", "labels": ["refund", "exchange", "complaint"]}
FREE_LABELS = {"kind": "label"}
EXACT = {"kind": "exact"}
INVOICE = {
    "kind": "json_fields",
    "fields": {"amount": "number", "currency": "string", "lines": "array", "note": "string"},
    "required": ["amount"],
}
TEXT = {"kind": "text_conservation", "length_ratio": [0.7, 1.4]}
DEEP: Any = []
for _ in range(70):
    DEEP = [DEEP]


def from_prints(spec: dict[str, Any], reference: Any, repeat: Any) -> tuple[str, list[str]]:
    a, b = fingerprint(spec, reference, KEY), fingerprint(spec, repeat, KEY)
    assert a is not None and b is not None
    return compare_prints(spec, a, b)


def from_outputs(spec: dict[str, Any], reference: Any, repeat: Any) -> Comparison:
    # The repeat is the compared side, the reference the cloud's (the comparator's reference).
    return compare(spec, repeat, reference)


def names_in(comparison: Comparison) -> list[str]:
    """The differing fields or checks, read straight off the comparator's diff."""
    diff = comparison.diff or {}
    if "fields" in diff:
        return sorted(diff["fields"])
    if "failed" in diff:
        return sorted(diff["failed"])
    return []


labels = st.sampled_from(["refund", " Refund", "REFUND  ", "exchange", "Ex change", "complaint"])
# Outside the list, or not a label at all.
bad_labels = st.sampled_from(["cancel", "  ", 3, ["refund"]])


@given(labels, labels, st.sampled_from([LABELS, FREE_LABELS]))
def test_label_prints_score_as_the_comparator(x: str, y: str, spec: dict[str, Any]) -> None:
    comparison = from_outputs(spec, x, y)
    if spec is FREE_LABELS or "ex change" not in (" ".join(v.split()).lower() for v in (x, y)):
        assert comparison.outcome in ("agree", "conflict")
        assert from_prints(spec, x, y) == (comparison.outcome, [])
    else:  # "ex change" is not one of LABELS
        assert from_prints(spec, x, y) == ("invalid", [])


@given(labels | bad_labels, labels | bad_labels)
def test_prints_score_every_answer_as_the_repeat_pair_does(x: Any, y: Any) -> None:
    assert from_prints(LABELS, x, y) == repeat_outcome(from_outputs(LABELS, x, y))


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.sampled_from([0, 1, 1.0, 2, 2.5])
    | st.sampled_from(["a", "b", "a b"]),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(["x", "y"]), children, max_size=2)
    ),
    max_leaves=6,
)


outputs = json_values.filter(lambda v: v is not None)  # null is no output


@given(outputs, outputs)
def test_exact_prints_score_as_the_comparator(x: Any, y: Any) -> None:
    for a, b in ((x, y), (x, x)):
        comparison = from_outputs(EXACT, a, b)
        assert from_prints(EXACT, a, b) == (comparison.outcome, [])


field_values = {
    "amount": st.sampled_from([10, 10.0, 12.5, 0]),
    "currency": st.sampled_from(["EUR", " EUR ", "E  UR", "E UR", "USD"]),
    "lines": st.sampled_from([[], [1], [1.0], [1, 2]]),
    "note": st.sampled_from(["paid", "paid ", "due"]),
}
invoices = st.fixed_dictionaries(
    {"amount": field_values["amount"]},
    optional={k: v for k, v in field_values.items() if k != "amount"},
)


@given(invoices, invoices, st.booleans())
def test_json_fields_prints_score_as_the_comparator(
    x: dict[str, Any], y: dict[str, Any], as_text: bool
) -> None:
    # LLM outputs often arrive as JSON text: the comparator reads both forms alike.
    repeat: Any = json.dumps(y) if as_text else y
    comparison = from_outputs(INVOICE, x, repeat)
    assert comparison.outcome in ("agree", "conflict")
    assert from_prints(INVOICE, x, repeat) == (comparison.outcome, names_in(comparison))


SENTENCES = [
    "The refund of 120 EUR was sent on 3 May.",
    "We did not charge you twice.",
    "Contact alice@example.com for help.",
    "Your order is on its way.",
    "我们没有收到您的付款。",
    "退款金额为三百元。",
    "It is not a problem, never mind.",
]
texts = st.lists(st.sampled_from(SENTENCES), min_size=1, max_size=4).map(" ".join)


@given(texts, texts)
def test_text_conservation_prints_score_as_the_comparator(x: str, y: str) -> None:
    for a, b in ((x, y), (x, x)):
        comparison = from_outputs(TEXT, a, b)
        outcome, names = from_prints(TEXT, a, b)
        assert outcome == comparison.outcome
        assert names == names_in(comparison)


@pytest.mark.parametrize(
    ("spec", "good", "bad"),
    [
        (LABELS, "refund", "cancel"),
        (LABELS, "refund", 3),
        (EXACT, {"a": 1}, DEEP),
        (EXACT, {"a": 1}, None),
        (INVOICE, {"amount": 1}, {"currency": "EUR"}),
        (INVOICE, {"amount": 1}, "not json"),
        (TEXT, "Sent.", "   "),
    ],
    ids=[
        "label-outside",
        "label-not-text",
        "exact-too-deep",
        "exact-none",
        "fields-missing",
        "fields-not-json",
        "text-blank",
    ],
)
def test_an_answer_outside_the_schema_makes_an_invalid_repeat(
    spec: dict[str, Any], good: Any, bad: Any
) -> None:
    bad_print = fingerprint(spec, bad, KEY)
    if bad is None:
        assert bad_print is None  # no output: no print, nothing to pair
        return
    assert bad_print is not None and bad_print["invalid"] is True
    good_print = fingerprint(spec, good, KEY)
    assert good_print is not None
    # Either side outside the schema: the comparator calls a bad repeat invalid and a bad
    # reference a conflict; as the cloud's own noise both read invalid.
    assert from_outputs(spec, good, bad).outcome == "invalid"
    assert from_outputs(spec, bad, good).outcome == "conflict"
    assert repeat_outcome(from_outputs(spec, good, bad)) == ("invalid", [])
    assert repeat_outcome(from_outputs(spec, bad, good)) == ("invalid", [])
    assert compare_prints(spec, good_print, bad_print) == ("invalid", [])
    assert compare_prints(spec, bad_print, good_print) == ("invalid", [])


def test_a_print_holds_digests_not_the_text() -> None:
    label = fingerprint(LABELS, "Refund", KEY)
    fields = fingerprint(INVOICE, {"amount": 12.5, "currency": "EUR", "note": "secret"}, KEY)
    assert label is not None and fields is not None
    assert "refund" not in str(label).lower()
    assert "EUR" not in str(fields) and "secret" not in str(fields) and "12.5" not in str(fields)
    assert sorted(fields["fields"]) == sorted(INVOICE["fields"])
    # Keyed: another key gives other digests for the same answer.
    other = fingerprint(LABELS, "Refund", b"o" * 32)
    assert other is not None and other["label"] != label["label"]


def test_prints_under_another_spec_are_not_compared() -> None:
    a = fingerprint(LABELS, "refund", KEY)
    b = fingerprint(FREE_LABELS, "refund", KEY)
    assert a is not None and b is not None
    with pytest.raises(ValueError, match="different comparator specs"):
        compare_prints(LABELS, a, b)


def test_a_text_longer_than_max_chars_has_no_print() -> None:
    assert fingerprint(TEXT, "Sent. " * 20, KEY, max_chars=100) is None
    assert compare(TEXT, "Sent. " * 20, "Sent.", max_chars=100).outcome is None


def test_repeat_outcome_names_what_differed() -> None:
    fields = compare(INVOICE, {"amount": 2, "currency": "USD"}, {"amount": 1, "currency": "EUR"})
    assert repeat_outcome(fields) == ("conflict", ["amount", "currency"])
    text = compare(TEXT, "We did not pay the 5 EUR fee.", "We did pay the 6 EUR fee.")
    assert repeat_outcome(text) == ("conflict", ["negations", "numbers"])
    assert repeat_outcome(compare(LABELS, "refund", "exchange")) == ("conflict", [])
    assert repeat_outcome(compare(LABELS, "refund", " Refund")) == ("agree", [])


# --- input identity ----------------------------------------------------------------------


def test_inputs_alike_but_for_spacing_and_compatibility_forms_hash_alike() -> None:
    plain = input_hash(KEY, {"text": "Refund me now, order 1234"})
    assert plain is not None and len(plain) == 32 and int(plain, 16) >= 0
    # Full-width letters and digits, an ideographic space, tabs and newlines.
    assert input_hash(KEY, {"text": " Ｒｅｆｕｎｄ\u3000me\n now,\torder １２３４ "}) == plain
    assert input_hash(KEY, {"text": "Refund me now, order 1234", "segments": None}) == plain
    assert input_hash(KEY, {"text": "Refund me now, order 1235"}) != plain
    assert input_hash(b"o" * 32, {"text": "Refund me now, order 1234"}) != plain
    # What else the input object holds is part of the input.
    assert input_hash(KEY, {"text": "Refund me now, order 1234", "segments": [0, 2]}) != plain
    assert input_hash(KEY, {"text": "Refund me now, order 1234", "lang": "en"}) != plain
    # Nothing to know an input by: no hash (every such input would look alike).
    assert input_hash(KEY, {"text": None, "segments": [1]}) is None
    assert input_hash(KEY, None) is None


@pytest.mark.parametrize("key_length", [0, 1, 32, 63, 64, 65, 200])
def test_keyed_digest_is_hmac_sha256(key_length: int) -> None:
    """The keyed digest is HMAC-SHA256 (RFC 2104) whatever the key's length: a key longer
    than the block is hashed first, a shorter one padded."""
    key = bytes(range(key_length % 256)) * (key_length // 256 + 1)
    key = key[:key_length]
    for data in (b"", b"refund", "退款 ".encode() * 400):
        assert fingerprints.keyed_hex(key, data) == hmac.new(key, data, "sha256").hexdigest()
