"""The compiled normaliser (`_normal.normal`) gives exactly what fingerprint's reference
`normalise_text_python` gives (NFKC, whitespace collapsed): its boundary characters are
what it takes them for in this Python's Unicode database, every BMP character alone and
between neighbours that combine with it reads alike, and so do drawn texts."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.compare import fingerprint, streamsafe
from controlplane.compare import native as reader
from controlplane.compare.fingerprint import normalise_text_python as reference
from tests.ingest.native_support import PIECES, native, require_compiled_reader


def compiled(text: str) -> str:
    return native("_normal").normal(text)


def composition_seconds() -> set[int]:
    """Code points that combine with the character before them (the second of a canonical
    composition, Hangul's vowel and trailing jamo)."""
    seconds = set(range(0x1161, 0x1176)) | set(range(0x11A8, 0x11C3))
    for code in range(0x30000):
        mapping = unicodedata.decomposition(chr(code))
        if mapping and not mapping.startswith("<") and len(parts := mapping.split()) == 2:
            seconds.add(int(parts[1], 16))
    return seconds


def test_each_boundary_character_is_stable_and_starts_a_segment() -> None:
    """A text may be split before each: combining class 0, its own NFKC, and never combined
    with the character before it. A range that is wrong here makes the native scan skip
    a character NFKC changes."""
    seconds = composition_seconds()
    wrong = [
        f"U+{code:04X}"
        for low, high in native("_normal").BOUNDARY_RANGES
        for code in range(low, high + 1)
        if unicodedata.combining(chr(code))
        or unicodedata.normalize("NFKC", chr(code)) != chr(code)
        or code in seconds
    ]
    assert not wrong, wrong[:20]


def test_every_bmp_character_alone_and_with_combining_neighbours() -> None:
    for code in range(0x10000):
        if 0xD800 <= code <= 0xDFFF:
            continue
        c = chr(code)
        for text in (c, f"a{c}\u0301", f"中{c}\u3099\u3000{c}\u11a8文"):
            assert compiled(text) == reference(text), (f"U+{code:04X}", text)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(
                [
                    *PIECES,
                    *"\u0301\u0308\u0323\u3099\u309a\u1161\u11a8ﬁ²℃①ｶﾞＡａ１￥\u00a8\u00a0",
                    "e\u0301",
                    "가",
                    "\u1100\u1161\u11a8",
                    "Å",
                    "Ⅻ",
                    "㍻",
                ]
            ),
            st.characters(codec="utf-8"),
        ),
        max_size=60,
    ).map("".join)
)
def test_drawn_texts_read_alike(text: str) -> None:
    assert compiled(text) == reference(text)


# Non-starters of different classes, and characters whose NFKD begins with one.
MARKS = "\u0301\u0316\u0308\u0323\u3099\u0f73\u0f75\uff9e\uff9f\U0001e944\u05b0áǖḉ\u1fd3"


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(st.sampled_from(MARKS), min_size=25, max_size=70),
            st.sampled_from(["a", "中", "e\u0301", " ", "\u034f", "Ａ", "가"]),
        ),
        max_size=8,
    ).map("".join)
)
def test_texts_with_long_runs_of_marks_read_alike(text: str) -> None:
    # Runs of more than 30 non-starters are cut by U+034F before NFKC (streamsafe), in both.
    assert compiled(text) == reference(text)


def test_the_marked_table_is_this_pythons_unicode() -> None:
    found = [
        code
        for code in range(0x110000)
        if unicodedata.combining(chr(code))
        or (
            unicodedata.decomposition(chr(code))
            and any(unicodedata.combining(c) for c in unicodedata.normalize("NFKD", chr(code)))
        )
    ]
    ranges: list[tuple[int, int]] = []
    for code in found:
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1] = (ranges[-1][0], code)
        else:
            ranges.append((code, code))
    assert tuple(ranges) == streamsafe.MARKED_RANGES
    # What the compiled scan and LONGEST_SAFE take for granted.
    assert max(sum(streamsafe.counts(chr(code))[:2]) for code in found) <= 2 * 3
    assert (
        max(
            sum(unicodedata.combining(c) != 0 for c in unicodedata.normalize("NFKD", chr(code)))
            for code in found
        )
        <= streamsafe.RUN // streamsafe.LONGEST_SAFE
    )


def test_a_run_of_more_than_30_non_starters_gets_a_joiner_after_every_30() -> None:
    run = "\u0301\u0316" * 40  # 80 marks
    made = streamsafe.stream_safe("a" + run + "b" + run[:30])
    assert made == "a" + run[:30] + "\u034f" + run[30:60] + "\u034f" + run[60:] + "b" + run[:30]
    text = "Zalgo: e\u0301\u0316 and an ordinary é"
    assert streamsafe.stream_safe(text) is text


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from([" ", "  ", "\t", "\n", "\r\n", "\x0b", "\x0c", *"\x1c\x1d\x1e\x1f"]),
            st.text(st.characters(max_codepoint=127), max_size=8),
            st.text(st.characters(max_codepoint=255), max_size=3),
        ),
        max_size=40,
    ).map("".join)
)
def test_drawn_latin1_texts_read_alike(text: str) -> None:
    """Text of one byte a character takes its own scan (no NFKC unless a character needs
    it: ², ½, the no-break space): every character str.split() splits at, and none other,
    collapses; a text with nothing to change comes back as it is."""
    out = compiled(text)
    assert out == reference(text)
    assert (out is text) == (out == text)


def test_every_pair_of_latin1_characters_reads_alike() -> None:
    """The one-byte scan's table, every entry beside every other, bare and between words."""
    chars = [chr(code) for code in range(256)]
    for a in chars:
        for b in chars:
            for text in (a + b, f"x{a}{b}y"):
                assert compiled(text) == reference(text), (f"U+{ord(a):04X} U+{ord(b):04X}", text)


def test_identity_uses_the_compiled_normaliser() -> None:
    """The input hash reads through it when the compiled reader runs (so the tests above
    guard every stored input hash)."""
    require_compiled_reader()
    assert reader.READER is not None and reader.READER.normal is native("_normal").normal
    text = "Ｏｒｄｅｒ　ＳＯ－１２３，\n\n  退款？ e\u0301"
    assert fingerprint.normalise_text(text) == reference(text) == "Order SO-123, 退款? é"


def test_a_text_of_many_short_runs_costs_at_most_a_few_calls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Hangul syllables each followed by a trailing jamo are runs of two characters each:
    past a few, the rest is normalised in one call, as the reference does, not one call
    per pair."""
    module = native("_normal")
    calls: list[str] = []

    def counted(form: str, piece: str) -> str:
        calls.append(piece)
        return unicodedata.normalize(form, piece)

    monkeypatch.setattr(module, "normalize", counted)
    text = "가\u11a8 " * 5_000
    assert module.normal(text) == reference(text)
    assert len(calls) <= 33, len(calls)
