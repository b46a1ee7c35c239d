"""The compiled named-span reader (controlplane.compare._spans, with _findspans.pxi, which
the masker shares) gives exactly what the Python reader gives: conservation.spans'
named spans and rest, redaction.find_spans' (kind, start, end) with the conservation
reader's phone pattern, and redaction.PHONE's match at each position. Then: its time
grows linearly on the hostile texts of each family."""

from __future__ import annotations

import re
from collections.abc import Callable
from types import ModuleType

import pytest
from hypothesis import strategies as st

from controlplane.compare import conservation, redaction
from tests.ingest import test_linear_time
from tests.ingest.native_support import (
    PIECES,
    alike_on,
    any_texts,
    assert_alike_in_linear_time,
    native,
    texts,
)
from tests.ingest.test_linear_time import repeat
from tests.ingest.test_text_conservation import CASES

PHONE = re.compile(redaction.PHONE)
PHONE_GROUP = re.compile(rf"(?P<phone>{redaction.PHONE})")
KINDS = {1: redaction.EMAIL, 2: redaction.URL, 10: "phone"}


@pytest.fixture(scope="module")
def module() -> ModuleType:
    return native("_spans")


def expected(text: str) -> tuple[frozenset[str], str]:
    found = conservation.spans(text)
    return found.named, found.rest


def assert_spans(module: ModuleType, text: str) -> None:
    assert module.spans(text) == expected(text), text


def assert_find_spans(module: ModuleType, text: str) -> None:
    for phones in (True, False):
        for emails in (True, False):
            for urls in (True, False):
                pattern = PHONE_GROUP if phones else None
                want = list(redaction.find_spans(text, pattern, emails, urls))
                for found in (module.find_spans_for_tests, module.find_spans_filtered_for_tests):
                    got = [
                        (KINDS[kind], start, end)
                        for kind, start, end in found(text, phones, emails, urls)
                    ]
                    assert got == want, (text, phones, emails, urls, found.__name__)


def assert_phones(module: ModuleType, text: str) -> None:
    for i in range(len(text) + 1):
        match = PHONE.match(text, i)
        assert module.phone_end_for_tests(text, i) == (match.end() if match else -1), (text, i)


def assert_all(module: ModuleType, text: str) -> None:
    assert_spans(module, text)
    assert_find_spans(module, text)
    assert_phones(module, text)


# --- the Python reader's own cases ------------------------------------------------------

CASE_TEXTS = sorted(
    {t for case in CASES for t in case[1:3] if isinstance(t, str)}
    | {
        "Acme Corp sent 《三体》 to “张三” at Bob@X.com; see https://x.io/a. "
        "The order INV-22 is late. Please call Bank of America.",
        "“" + "a" * 200 + "”",
        "“" + "a" * 201 + "”",
        "“”“b”",
        '""x" 「y」 《z》 『w』',
        "“" * 500 + "《三体》",
    }
)


@pytest.mark.parametrize("text", CASE_TEXTS)
def test_the_conservation_cases(module: ModuleType, text: str) -> None:
    assert_all(module, text)


# --- each branch, by hand -------------------------------------------------------------

EDGE_CASES = [
    "",
    " ",
    "plain text without anything",
    # phones: international (+ and 00 with its lookbehind, parentheses, groups 1 to 4)
    "+86 13800138000",
    "+86 138 0013 8000",
    "+8613800138000",
    "0086 138-0013-8000",
    "10086 138-0013-8000",
    "+44 (20) 7946 0958",
    "+44 (0)20 7946 0958",
    "+1 (555) 123-4567 ext",
    "+1 1 1 1",
    "+12 34 56 78 90 12 34",
    "+123456789012345678",
    "+1234567890123456789012",
    "+1\u200b234\u200b5678",
    "+1\u2060234-5678/90.12",
    "+٨٦ ١٣٨٠٠١٣٨٠٠٠",
    "+86 ١٣٨٠٠١٣٨٠٠٠",
    "+(1)234",
    "+1((2)34 56",
    # Chinese mobiles, with the lookbehind and both separators
    "13800138000",
    "138 0013 8000",
    "138-0013-8000",
    "213800138000",
    "138001380001",
    "12800138000",
    "1३8 0013 8000",
    "138 0013 80000",
    "a13800138000b",
    # Chinese landlines
    "(010) 12345678",
    "(010)12345678",
    "(0755)1234567",
    "010-12345678",
    "0755 1234567",
    "01012345678",
    "0101234567",
    "5010-12345678",
    "(01) 12345678",
    "010 123456789",
    # North American
    "(555) 123-4567",
    "(555)123-4567",
    "555-123-4567",
    "555 123 4567",
    "5555-123-4567",
    "555-123-45678",
    "555-1234567",
    "400-123-4567",
    "(555) 123 4567 and (666) 777-8888",
    # emails: accents, Greek, Cyrillic, zero-width, local part characters, no TLD
    "ann@example.com",
    "Bob@X.COM",
    "josé@exämple.com",
    "αλφα@παράδειγμα.ελ",
    "иван@пример.рф",
    "dan\u200b@example.com",
    "dan@exa\u200bmple.com",
    "a.b_c%d+e-f@sub.example.co.uk",
    "a@b.c",
    "a@b.cc",
    "a@b.c1",
    "a@b.c-d.ee.f",
    "a@-.aa",
    "a@.aa",
    "@example.com",
    "a@@example.com",
    "a@b@c.de",
    "x@y.zz@w.vv",
    "a.@b.cc.",
    "×@b.cc ÷@b.cc Ā@b.cc ɏ@b.cc ɐ@b.cc Ͱ@b.cc ӿ@b.cc Ԁ@b.cc",
    "a@b.c×d",
    "a@b.ÀÖ",
    "call 13800138000@example.com",
    "+86 13800138000@example.com",
    "ann＠example.com",
    # URLs: schemes, trailing punctuation, stop characters, runs
    "see https://x.io/a.",
    "see http://x.io/a?b=c),",
    "www.example.com",
    "www.a",
    "www.ab",
    "http://",
    "http://a",
    "http://ab",
    "https:/x.io",
    "httpss://x.io",
    "https://x.io/“quoted”",
    "https://x.io，下一句",
    "(https://x.io/a_(b))",
    "x@www.aa/",
    "www.a@b.cc/",
    "a@b.c/www.",
    "https://a@b.cc/x",
    "www.www.www.ab",
    "https://x.io/1380013800 13800138000",
    "13800138000https://x.io",
    # ID-like tokens, numbers with units, trimming
    "INV-2024-001",
    "_AB12_",
    "-x1-",
    "order AB-1234 SO-2037872 x1y2",
    "2026-11-30",
    "3pm 5th 10kg 2x 7% 12GB 12gb 3MB 1min 5ms 9st 9nd 9rd 9th 9AM 9h 9d 9w 9k 9K 9M 9X",
    "3pmx 5ths 10Kg 12Gb 3.5kg 1a2 a1 1a",
    "1_1_1_a",
    "a_1",
    "１a ١a",
    "a1@b.cc",
    "ab 12cd 34",
    # quoted spans: each mark, nesting, the apostrophe rule, whitespace collapsed
    "“张三”",
    "「y」『w』《z》",
    '"a  b\t\nc"',
    "' x '",
    "don't and users' 'quoted'",
    "a'b'c",
    "1'b'2",
    "'é'a",
    "“a",
    "”a“",
    '"',
    '""',
    "《》《a》",
    "“a”“b”",
    "“" + "a" * 199 + "”",
    "'" * 5,
    "'\u3000x\u3000'",
    # capitalised runs: connectors, possessive repetition, inside a word, strips, I,
    # sentence openings, opening words, abbreviated names
    "Acme Corp",
    "We met Bank of America and Johnson & Johnson.",
    "the University of the Arts",
    "Ludwig van Beethoven and Vincent van Gogh, Leonardo da Vinci",
    "AT&T and O'Neil and O’Neil and U.S.A and U.S. and A.b.C",
    "iPhone Pro",
    "5Acme",
    "élan Acme",
    "_Acme",
    "Acme-",
    "Acme&",
    "Acme-&-",
    "A-",
    "I think I am",
    "So I Am",
    "Hi John",
    "Hi",
    "Hello. Dear Ann, Thanks Anna! Dec 5. Tue",
    "Monday. It rains",
    "NASA said",
    "NASA",
    "He said NASA. NASA. Acme.",
    "Meet Dec Jan Sept Thurs Thur Tues May Wed",
    "Wed. Dec.",
    "see: Acme",
    "see; Acme\nAcme",
    "(Acme) “Acme” 「Acme」 ‘Acme’ （Acme）",
    "x 《Acme》 y",
    "x. \t\"'“‘(（「『《Acme",
    "x Acme \t Corp",
    "x Acme of",
    "x Acme of Corp",
    "x Acme of  Corp",
    "x Acme of\tthe Corp",
    "x Acme & ",
    "x Acme &Corp",
    "x The The The",
    "The The",
    "A B C",
    "x A.B.C.d",
    "x A1 B2",
    "x Ab12 Cd",
    # rest: spans blanked in order, IDs after them
    "mail ann@example.com or call 138 0013 8000 or see www.x.io about AB12.",
    "ann@example.com13800138000",
    "AB12ann@example.com",
    "INV-1@x.io",
]


@pytest.mark.parametrize("text", EDGE_CASES)
def test_edge_cases(module: ModuleType, text: str) -> None:
    assert_all(module, text)


def test_the_quick_digit_test_is_re_digit_everywhere(module: ModuleType) -> None:
    assert module.nd_digit_mismatches_for_tests() == []


def test_the_native_word_tables_are_the_python_readers(module: ModuleType) -> None:
    opening, abbreviated, units = module.tables_for_tests()
    assert opening == conservation._OPENING_WORDS
    assert abbreviated == conservation._ABBREVIATED_NAMES
    for unit in units:
        assert conservation._NUMBER_WITH_UNIT.match("12" + unit), unit
    # Every ending the pattern reads is in the table: a letter or two after digits.
    alphabet = [chr(c) for c in range(33, 127) if not chr(c).isdigit()]
    for a in alphabet:
        for b in ["", *alphabet]:
            if conservation._NUMBER_WITH_UNIT.match("12" + a + b):
                assert a + b in units, a + b
    assert {u for u in units if len(u) == 3} == {"min"}


# --- any text ---------------------------------------------------------------------------

# Dense digits and separators: each phone branch and its backtracking.
phone_texts = st.lists(
    st.sampled_from([*"0123456789", *"0011", *"+()", " ", "-", ".", "/", "\u200b", "٣", "a"]),
    max_size=45,
).map("".join)
email_url_texts = st.lists(
    st.sampled_from(
        [*"aBé", "ω", "ж", "\u200b", "1", *"-._%+@@", " ", "×", "中", "co", "www.", "http://"]
        + ["https://", ")", ",", "]", "<", "'", "“", "、", "13800138000", "+86 138"]
    ),
    max_size=40,
).map("".join)


def spans_and_finds(text: str) -> None:
    module = native("_spans")
    assert_spans(module, text)
    assert_find_spans(module, text)


def phones_and_spans(text: str) -> None:
    module = native("_spans")
    assert_phones(module, text)
    assert_spans(module, text)


test_any_text_of_the_readers_pieces = alike_on(texts, spans_and_finds)
test_any_text_at_all = alike_on(any_texts, spans_and_finds)
test_phone_numbers_match_where_the_pattern_matches = alike_on(phone_texts, phones_and_spans)
test_emails_and_urls_are_found_as_the_python_finders_find_them = alike_on(
    email_url_texts, spans_and_finds
)


def test_the_pieces_hold_what_the_span_reader_looks_for() -> None:
    assert {"Hi", "O'Neil", "INV-2024-001", "ann@example.com", "www."} <= set(PIECES)


# --- linear time --------------------------------------------------------------------------

# The step-5 families that aim at spans (test_linear_time's), and more of the span reader's.
SPAN_KINDS = ("email", "url", "phone", "token", "digits: one run", "quotes", "capitalised", "mixed")
FAMILIES: dict[str, Callable[[int], str]] = {
    **{k: v for k, v in test_linear_time.FAMILIES.items() if k.startswith(SPAN_KINDS)},
    "phone: +digits": repeat("+1234567890123456789012345"),
    "phone: 00 runs": repeat("0"),
    "phone: groups": repeat("+1-23-45-67-89 "),
    "phone: 138 0013 800": repeat("138 0013 800 "),
    "quotes: 'a'a": repeat("'a"),
    "capitalised: Hi. Hi.": repeat("Hi. "),
    "capitalised: iA": repeat("iA"),
    "capitalised: A-&": repeat("A-&"),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_reading_time_grows_linearly(module: ModuleType, family: str) -> None:
    assert_alike_in_linear_time(
        module.spans, FAMILIES[family], family, alike=lambda text: assert_spans(module, text)
    )
