"""The compiled masker (`_mask.mask`) against its reference, `Masker._mask_python`: the same
masked text, and the same placeholders and counts left in the Masker (same keys, numbered
in the same order) — on every redaction table case, near misses of every branch of the
first pass and of the token pass, several texts through one Masker, texts drawn from the
readers' alphabets; and its time grows linearly on hostile text."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.compare.redaction import Masker
from tests.ingest import test_linear_time, test_redaction
from tests.ingest.native_support import (
    PIECES,
    alike_on,
    any_texts,
    assert_alike_in_linear_time,
    native,
    texts,
)

_mask = native("_mask")


def compiled(masker: Masker, text: str) -> str:
    return _mask.mask(text, masker._placeholders, masker._counts)


def assert_same_through(texts_: list[str]) -> None:
    """The texts masked in turn by one Masker each way: texts, placeholders and counts
    equal after each (the dicts in the same order too: numbering order)."""
    reference, native_ = Masker(), Masker()
    for text in texts_:
        expected = reference._mask_python(text)
        got = compiled(native_, text)
        assert got == expected, (text, got, expected)
        assert list(native_._placeholders.items()) == list(reference._placeholders.items()), text
        assert list(native_._counts.items()) == list(reference._counts.items()), text


def assert_same(text: str) -> None:
    assert_same_through([text])
    # Masking its own output again, with the numbering it made: idempotent alike.
    reference = Masker()
    masked = reference._mask_python(text)
    assert_same_through([text, masked, text])


TABLE = [text for text, _ in test_redaction.CASES] + [masked for _, masked in test_redaction.CASES]
TABLE += [
    "<NUM_١٣٨٠٠١> <NUM_1>",
    "<NUM_1> and <EMAIL_12>",
    "order <SO-13800138000>",
    "ref <ID_13800138000>",
    "x <a13800138000>",
    "code 3The7９YY9",
    "Customer ann@example.com, phone 13800138000",
    "Reply sent to ANN@example.com",
    "Reply sent to ann@example.com and bob@example.com",
    "timeout calling 13800138000",
    "Refund ann@example.com now. " * 10,
    "x" * 45 + " 138 0013 8000 tail",
    "x" * 45 + " INV-2024-00123 tail",
]


@pytest.mark.parametrize("text", TABLE)
def test_every_table_text_masks_the_same(text: str) -> None:
    assert_same(text)


def test_the_table_through_one_masker_numbers_the_same() -> None:
    assert_same_through(TABLE)
    assert_same_through(TABLE[::-1])


# Near misses of each branch, in the order of redaction._pattern's alternation.
BRANCHES = [
    # no digit and no "@": the text as it is
    "",
    "plain words only",
    "中文，没有数字。",
    "\u00a0\u2007\u2009\u202f",
    # KEEP: placeholder shapes, and what is not one
    "<EMAIL_1><IP_2><IDCARD_3><CARD_4><PHONE_5><ID_6><NUM_7>",
    "<TRUNCATED_123456789> <TRUNCATED_1234567890>",
    "<NUM_1234567> <NUM_123456> <NUM_> <NUM_1 <num_1> <NAME_1> <IDCARD_12",
    "<NUM_١> <NUM_１> <ID_１２３４５６>",
    "<<NUM_1>> <ID-1> ID_12 a<ID_1>b",
    # IPv4: octets, neighbours, more than 255
    "1.2.3.4 255.255.255.255 256.1.1.1 1.2.3.256 999.1.1.1",
    "1.2.3.4.5 .1.2.3.4 1.2.3.4. 01.2.3.4 1234.1.1.1 1.2.3.4567",
    "a1.2.3.4 1.2.3.4b _1.2.3.4 1.2.3.4- x-10.0.0.1",
    "１９２.１６８.１.１ and ١٩٢.١٦٨.١.١",
    "192.168.1.1:8080 192.168.001.010",
    # IPv6: group counts, lengths, neighbours
    "fe80:0:0:0:202:b3ff:fe1e:8329 a:b:c:d 1:2:3 1:2:3:4:5:6:7:8:9",
    "12345:1:2:3 1:2:3:4: :1:2:3:4 1:2:3:45678 abcd:ef01:2345:6789",
    "g1:2:3:4 1:2:3:4g é1:2:3:4 1:2:3:4é ::1 fe80::1:2:3 1::2:3:4",
    "ff:ff:ff:ff 1:2:3:4 1.2.3.4 a:b:c:d:e:f:a:b",
    # IDCARD
    "11010519491231002X 110105194912310021 11010519491231002x 1101051949123100",
    "a11010519491231002X 11010519491231002Xa 11010519491231002XX 1101051949123100211",
    # CARD: groups, plain runs, Luhn
    "4111 1111 1111 1111 4111-1111-1111-1 4111.1111.1111.1234567 4111 1111 1111 12345678",
    "4111111111111111 4111111111111112 1234567890123 12345678901234567890",
    "4111\u200b1111\u200b1111\u200b1111 4111/1111/1111/1111 41111 1111 1111 1111",
    "4111 111 1111 1111 4111 1111 1111 1111x 4111 1111 1111 1111_",
    # SSN
    "123-45-6789 123-45-67890 1123-45-6789 -123-45-6789 123-45-6789- 123-456-789",
    # PHONE: every branch and their neighbours
    "13800138000 138 0013 8000 +86 138-0013-8000 008613800138000 +8613800138000",
    "010-62345678 (0755) 2345678 (010)12345678 0755-234567 02012345678",
    "+44 20 7946 0958 +1 (415) 555-0123 (415)555-0123 415.555.0123 400-800-1234",
    "12345 123456 1234567 23456789012 11111111111 1 2 3 4 5",
    "phone13800138000 13800138000x SO-13800138000 13800138000-1",
    # emails, and emails against the other branches
    "ann@example.com ANN@Example.COM dan\u200b@example.com josé@exämple.com",
    "ann@192.168.1.1 13800138000@qq.com 1@2.cc a@b.c @example.com ann@ a@b.co.uk",
    "ann＠example.com, ann@example.com1, 12345678@x.io",
    # the token pass: IDs, long runs, full-width digits, trimming
    "AB12 A1B2 AB1 A12 -A12- _AB12_ a_1_2 1_2_3_4 ab-12-cd 12ab",
    "1234567 12345 １２３４５６７ ١٢٣٤٥٦٧ 123456a a123456 x-123456",
    "7９YY9 3The7９YY9 ９９９９９９ ab١٢ ٠٠٠٠٠٠٠",
    "12-3456789 12-345 ab 12 cd 123456_ 1.234567 1,234,567",
    "¹²³⁴⁵⁶⁷ ²AB12",
]


@pytest.mark.parametrize("text", BRANCHES)
def test_every_branch_masks_the_same(text: str) -> None:
    assert_same(text)


def test_the_branches_through_one_masker_number_the_same() -> None:
    assert_same_through(BRANCHES + TABLE + BRANCHES)


# Characters the masker's branches turn on, drawn densely.
MASK_PIECES = [
    *"0123456789",
    *"0123456789",
    *".:-_/ ()+<>@xXaAfgé",
    "\u200b",
    "\u00a0",
    "١",
    "０",
    "＠",
    "NUM_",
    "ID_",
    "IP_",
    "TRUNCATED_",
    "CARD_",
    "com",
    ".cn",
    "00",
    "86",
    "138",
    "4111",
]
mask_texts = st.lists(st.sampled_from(MASK_PIECES), max_size=50).map("".join)


test_drawn_texts_mask_the_same = alike_on(texts, assert_same)


test_any_texts_mask_the_same = alike_on(any_texts, assert_same)


test_near_misses_mask_the_same = alike_on(mask_texts, assert_same)


test_drawn_texts_through_one_masker_number_the_same = alike_on(
    st.lists(st.one_of(texts, mask_texts), max_size=6), assert_same_through, examples=100
)


@settings(max_examples=200, deadline=None)
@given(test_redaction.texts_with_secrets())
def test_texts_with_secrets_mask_the_same(case: tuple[str, list[str]]) -> None:
    assert_same(case[0])


def test_the_simulators_rewrites_mask_the_same() -> None:
    """Realistic replies (benchmarks' rewrites): the edge and cloud texts of a pair through
    one Masker, as a result's fields are."""
    from benchmarks.comparators import rewrites

    for language in ("en", "zh"):
        for size in (300, 3_000):
            for edge, cloud in rewrites(language, size, 5, seed=11):
                assert_same_through([edge, cloud, edge])


def test_many_seeded_texts_mask_the_same() -> None:
    """More near misses than hypothesis draws in its budget: 3,000 seeded texts."""
    rng = random.Random(10)
    pieces = PIECES + MASK_PIECES
    drawn = ["".join(rng.choices(pieces, k=rng.randint(0, 30))) for _ in range(3_000)]
    for start in range(0, len(drawn), 30):
        assert_same_through(drawn[start : start + 30])


# Hostile inputs: all of test_linear_time's families, and near misses of the masker's own
# branches over and over.
repeat = test_linear_time.repeat
FAMILIES: dict[str, Callable[[int], str]] = {
    **test_linear_time.FAMILIES,
    "ip: 1.1.1.1.1.": repeat("1."),
    "ip: 1.1.1.1 1.1.1.1": repeat("1.1.1.1 "),
    "ip6: a:a:a:a:": repeat("a:"),
    "ip6: 1:2:3:4:5:6:7:8:9:": repeat("1:2:3:4:5:6:7:8:9:"),
    "card: 1111 1111 1111 ": repeat("1111 "),
    "ssn: 11-11-11-": repeat("11-"),
    "keep: <NUM_1<NUM_1": repeat("<NUM_1"),
    "keep: <NUM_1> a1": repeat("<NUM_1> a1 "),
    "phone: 138 0013 ": repeat("138 0013 "),
    "phone: +86 +86": repeat("+86 "),
    "token: a1a1a1": repeat("a1"),
    "token: 123456 ": repeat("123456 "),
    "token: 1234567-": repeat("1234567-"),
    "email: 1@1@": repeat("1@"),
}


def _fresh_mask(text: str) -> str:
    return _mask.mask(text, {}, {})


@pytest.mark.parametrize("family", list(FAMILIES))
def test_masking_grows_linearly(family: str) -> None:
    assert_alike_in_linear_time(
        _fresh_mask,
        FAMILIES[family],
        family,
        alike=lambda text: assert_same_through([text]),
        collect=False,
    )
