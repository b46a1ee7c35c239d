"""Masking a list of strings in one call (`_mask.mask_many`, and `Masker.json`'s lists)
against masking them one by one with the Python reference: the same strings, and the same
placeholders and counts left in the Masker, numbered in the same order; a list holding
anything but strings of at most `max_chars` characters is left to the one-by-one path."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.compare import native as reader
from controlplane.compare.redaction import Masker
from tests.ingest import test_redaction
from tests.ingest.native_support import any_texts, native, require_compiled_reader, texts

_mask = native("_mask")


def one_by_one(values: list[str]) -> tuple[list[str], Masker]:
    """The reference: each string through the Python masker in turn, by one Masker."""
    masker = Masker()
    return [masker._mask_python(value) for value in values], masker


def assert_same_state(got: Masker, expected: Masker) -> None:
    assert list(got._placeholders.items()) == list(expected._placeholders.items())
    assert list(got._counts.items()) == list(expected._counts.items())


def assert_masks_alike(values: list[str]) -> None:
    expected, reference = one_by_one(values)
    masker = Masker()
    got = _mask.mask_many(values, masker._placeholders, masker._counts, 32_000)
    assert got == expected, (values, got, expected)
    assert_same_state(masker, reference)


@settings(max_examples=120, deadline=None)
@given(st.lists(texts, max_size=12))
def test_drawn_lists_mask_as_one_by_one(values: list[str]) -> None:
    assert_masks_alike(values)


@settings(max_examples=80, deadline=None)
@given(st.lists(any_texts, max_size=8))
def test_lists_of_any_characters_mask_as_one_by_one(values: list[str]) -> None:
    assert_masks_alike(values)


def test_the_redaction_table_in_one_list_masks_as_one_by_one() -> None:
    table = [text for text, _ in test_redaction.CASES]
    assert_masks_alike(table)
    # Again with the numbering it made: masked text is masked alike (idempotent).
    masked, _ = one_by_one(table)
    assert_masks_alike(table + masked + table)


def test_a_list_with_a_long_or_other_item_is_not_masked_at_all() -> None:
    for values in (
        ["ann@example.com", "13800138000" * 3],  # 33 characters: past max_chars
        ["ann@example.com", 13800138000],
        ["ann@example.com", None],
        ["ann@example.com", ["13800138000"]],
    ):
        masker = Masker()
        assert _mask.mask_many(values, masker._placeholders, masker._counts, 32) is None
        assert masker._placeholders == {} and masker._counts == {}


def json_one_by_one(value: Any, max_chars: int) -> Any:
    """Masker.json as it reads a value item by item, every string on its own."""
    masker = Masker()

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return masker.text(v, max_chars)
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, dict):
            return {masker.text(k, max_chars): walk(x) for k, x in v.items()}
        return v

    kept = reader.READER
    reader.READER = None  # the Python reference
    try:
        return walk(value)
    finally:
        reader.READER = kept


# A conflicting text_conservation diff's shape, with secrets in its names and a long one.
diffs = st.fixed_dictionaries(
    {
        "failed": st.just(["numbers", "spans"]),
        "numbers": st.fixed_dictionaries(
            {side: st.lists(texts, max_size=6) for side in ("edge", "cloud", "missing")}
        ),
        "spans": st.fixed_dictionaries(
            {side: st.lists(any_texts, max_size=6) for side in ("edge", "cloud", "extra")}
        ),
        "notes": st.lists(st.one_of(texts, st.integers(), st.none()), max_size=4),
    }
)


@settings(max_examples=80, deadline=None)
@given(diffs, st.sampled_from([40, 32_000]))
def test_json_masks_a_diff_as_string_by_string(diff: dict[str, Any], max_chars: int) -> None:
    # Both readers, through the lists' one call (or the one-by-one path past max_chars).
    expected = json_one_by_one(diff, max_chars)
    require_compiled_reader()
    assert Masker().json(diff, max_chars) == expected
    kept = reader.READER
    reader.READER = None
    try:
        assert Masker().json(diff, max_chars) == expected
    finally:
        reader.READER = kept
