"""Hostile tests of the compiled text reader (controlplane/compare/_*.pyx) against its
Python reference (conservation.read_python, Masker._mask_python).

The one finding (a str subclass raised TypeError in the compiled reader) is fixed; its tests
pass beside the attacks that held, which are plain
tests: differential fuzzing on drawn texts (long ones, every Nd digit script, astral
planes, NUL, zero-width and bidi marks, case-folding oddities, placeholders and their near
misses, texts cut mid-pattern), one Masker across texts and Masker.json on nested payloads,
many calls in a subprocess (no crash, no RSS growth), time growth at 20k vs 200k
characters on families aimed at the native loops that read back or re-scan, and the real
API with hostile texts under `payload_policy: redacted`.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
import unicodedata
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from controlplane.compare import native
from controlplane.compare.conservation import read, read_python
from controlplane.compare.redaction import Masker
from controlplane.db import session_scope
from controlplane.rollout.configs import apply_config
from tests.conftest import Api, make_api, make_result
from tests.ingest.native_support import (
    PIECES,
    assert_alike_in_linear_time,
    assert_reads_alike,
    require_compiled_reader,
)
from tests.ingest.test_linear_time import repeat


@pytest.fixture(autouse=True)
def compiled() -> None:
    require_compiled_reader()


# --- the hostile alphabet ---------------------------------------------------------------

ND_DIGITS = [
    chr(c) for c in range(0x80, sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Nd"
]
# fmt: off
HOSTILE = [
    "\u00a0", "\u2007", "\u2009", "\u202f", "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff",
    "\u200e", "\u200f", "\u202e", "\u2066", "\u2028", "\u2029", "\x85", "\x1c", "\x1f", "\u3000",
    "\r", "\x0b", "\x0c", "\x00", "\ud800", "\udfff", "\U0001f600", "\U00020000",
    "İ", "ı", "ſ", "\u212a", "ß", "ẞ", "ǅ", "ǈ", "ǋ", "\u0301", "\u0345", "µ", "Σ", "ς",
    "İ.", "ǅ.", "\u212a.", "Ｊ.", "Mr.", "e.g.", "approx.", "(Mr.", "\"e.g.", "a.\t", "J. ",
    "𝟏", "𝟘", "١", "۴", "߃", "९", "৩", "๓", "١٬٢٣٤", "٫", "１", "１，０００．５", "²", "½", "Ⅻ", "①",
    "〇", "零", "壹", "貳", "廿", "卅", "兆", "萬", "億", "两", "俩", "幺", "\u3021", "\u3029",
    "百分之", "百分之三", "一点", "点点", "万亿", "亿万", "十十", "零零", "二〇二六", "三到五",
    "<NUM_1>", "<NUM_1234567>", "<TRUNCATED_9>", "<TRUNCATED_1234567890>", "‹NUM_١>",
    "<NUM_١>", "<ID_1", "<EMAIL_>", "<PHONE_", "NUM_12", "<CARD_0>",
    "http://", "https://", "www.", "@", "＠", ".com", "a@b.co", "josé@exämple.com",
    "+", "00", "(0", "(", ")", "-", "/", " ", "..", "...", "…", ".  ", "'", "\"", "“", "”",
    "1" * 30, "9" * 50, "12,345.6789", "0" * 29 + "1", "×", "÷", "n’t", "N'T", "nOt", "NoT",
    "NOBODY", "no_", "not5", "5not", "Per Cent", "PERCENT", "percentage",
]
# fmt: on


def _piece(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.45:
        return rng.choice(PIECES)
    if r < 0.75:
        return rng.choice(HOSTILE)
    if r < 0.85:
        return rng.choice(ND_DIGITS)
    if r < 0.95:
        return chr(rng.randrange(sys.maxunicode + 1))
    return chr(rng.randrange(0x80, 0x3000))


def drawn(rng: random.Random, pieces: int) -> str:
    return "".join(_piece(rng) for _ in range(rng.randrange(pieces + 1)))


def assert_same_masks(texts: list[str]) -> None:
    compiled, python = Masker(), Masker()
    for text in texts:
        assert compiled._mask(text) == python._mask_python(text), (texts, text)
        assert list(compiled._placeholders.items()) == list(python._placeholders.items()), texts
        assert list(compiled._counts.items()) == list(python._counts.items()), texts


# --- findings ---------------------------------------------------------------------------


class Text(str):
    """A str subclass (numpy.str_, a StrEnum member, markupsafe.Markup …): isinstance(x, str)."""


def test_a_str_subclass_reads_as_its_str() -> None:
    assert read(Text("Hi John. no 3")) == read_python(Text("Hi John. no 3"))


def test_a_str_subclass_masks_as_its_str() -> None:
    assert Masker().text(Text("13800138000")) == Masker()._mask_python(Text("13800138000"))


# --- what held: differential ---------------------------------------------------------------

EDGE_TEXTS = [
    "",
    " ",
    "\u3000\u2028 \t\n",
    "\x00",
    "\x00" * 10 + "138\x000013\x008000",
    "\ud800",
    "a\udfff.b",
    "İ. ſ. K. ß. ǅ. Ｊ. x",
    "1" * 28,
    "1" * 29,
    "1" * 4300,
    "1" * 4301,
    "1" * 4299 + ".5",
    "9" * 4300 + "万",
    "١" * 28 + "万%",
    "١" * 4301,
    "𝟏" * 40 + " percent",
    "一" * 29,
    "一" * 4301,
    "百分之" + "1" * 4301,
    "百分之" + "١" * 29 + ".5",
    "0" * 4400 + "1,234",
    "1," + ",".join(["234"] * 2000),
    "<NUM_1><NUM_1234567><TRUNCATED_9>‹NUM_١><NUM_١><ID_13800138000>",
    "<NUM_" + "1" * 7 + ">",
    "<TRUNCATED_" + "1" * 10 + ">",
    "ends mid email ann@exam",
    "ends mid phone +86 138",
    "ends mid url https://",
    "ends mid quote “abc",
    "ends mid number 1,23",
    "ends mid 百分之",
    "ends mid n'",
    "(" * 500 + "a.",
    "'" * 500 + "Mr.",
    "a.\t" * 300,
    "\u200f138\u200b0013\u200b8000\u200e ann\u200b@example.com",
    "١٣٨ ٠٠١٣ ٨٠٠٠ and +٨٦ ١٣٨٠٠١٣٨٠٠٠",
    "１３８００１３８０００ ＠ ann＠example.com",
]


@pytest.mark.parametrize("text", EDGE_TEXTS, ids=range(len(EDGE_TEXTS)))
def test_edge_texts_read_and_mask_the_same(text: str) -> None:
    assert_reads_alike(text)
    assert_same_masks([text, text[::-1], text])


def test_every_nd_digit_reads_and_masks_the_same() -> None:
    # Each decimal digit of every script in a phone, a card, a number and a token.
    for digit in ND_DIGITS:
        for text in (
            f"call 13{digit}00138000 or +86 {digit * 11}",
            f"{digit * 4} {digit * 4} {digit * 4} {digit * 4} and {digit}.{digit}万",
            f"INV-{digit * 3}a and 百分之{digit} and {digit},{digit * 3}",
        ):
            assert_reads_alike(text)
            assert_same_masks([text])


@pytest.mark.parametrize("seed", range(4))
def test_drawn_short_texts_read_and_mask_the_same(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(400):
        texts = [drawn(rng, 40) for _ in range(3)]
        assert_reads_alike(texts[0])
        assert_same_masks(texts)


@pytest.mark.parametrize("seed", range(2))
def test_drawn_long_texts_read_and_mask_the_same(seed: int) -> None:
    rng = random.Random(100 + seed)
    for size in (10_000, 60_000):
        text = ""
        while len(text) < size:
            text += drawn(rng, 200)
        assert_reads_alike(text)
        assert_same_masks([text, text[: size // 3], text])


def _json_masked(payload: Any, max_chars: int, compiled: bool) -> tuple[Any, Any, Any]:
    kept = native.READER
    if not compiled:
        native.READER = None
    try:
        masker = Masker()
        out = masker.json(payload, max_chars)
        return out, list(masker._placeholders.items()), list(masker._counts.items())
    finally:
        native.READER = kept


def _payload(rng: random.Random, depth: int = 0) -> Any:
    r = rng.random()
    if depth > 3 or r < 0.4:
        return drawn(rng, rng.choice([8, 40, 200]))
    if r < 0.7:
        return [_payload(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {drawn(rng, 6): _payload(rng, depth + 1) for _ in range(rng.randrange(4))}


def test_masker_json_on_nested_payloads_is_the_same() -> None:
    rng = random.Random(7)
    for _ in range(150):
        payload = _payload(rng)
        max_chars = rng.choice([0, 1, 5, 20, 64, 100, 1000, 32_000])
        assert _json_masked(payload, max_chars, True) == _json_masked(payload, max_chars, False)
    # Keys that mask alike keep both values, numbered alike by either reader.
    keys = {"ann@example.com": 1, "ANN@example.com": 2, "<EMAIL_1>": 3, "ann\u200b@example.com": 4}
    assert _json_masked(keys, 100, True) == _json_masked(keys, 100, False)


def test_one_masker_past_a_thousand_placeholders_numbers_alike() -> None:
    # The compiled masker spells "<KIND_n>" once per process up to n = 1,000; past it, anew.
    texts = [
        " ".join(f"138{i:08d}" for i in range(k * 300, k * 300 + 300))
        + " "
        + " ".join(f"AB{i}" for i in range(k * 300, k * 300 + 300))
        for k in range(5)
    ]
    assert_same_masks(texts)


def test_threads_reading_at_once_read_alike() -> None:
    from concurrent.futures import ThreadPoolExecutor

    rng = random.Random(3)
    texts = [drawn(rng, 60) for _ in range(200)]
    expected = [(read_python(t), Masker()._mask_python(t)) for t in texts]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda t: (read(t), Masker().text(t)), texts * 1))
    assert got == expected


# --- what held: crashes and memory -------------------------------------------------------------

_WORKER = textwrap.dedent(
    """
    import os, random, sys
    from controlplane.compare import native
    from controlplane.compare.redaction import Masker
    N = native.READER
    assert N is not None

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    rng = random.Random(1)
    alphabet = [chr(c) for c in range(0, 0x3100)] + ["\\ud800", "\\U0001d7cf", "@", "www.",
        "http://", "<NUM_1>", "<TRUNCATED_", "百分之", "+86 ", "1" * 30, "“", "'", "Mr."]
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(300))) for _ in range(200)]
    texts += ["1" * 4400, "١" * 5000, "“" * 3000 + "x", "a@" * 2000, "(" * 3000 + "a.", ""]

    def work(text):
        N.counts(text)
        named, rest = N.spans(text)
        N.numbers(rest)
        N.numbers(text)
        N.mask(text, {}, {})
        Masker().json({text: [text, {"k": text}]}, 64)

    for text in texts:
        work(text)
    for _ in range(3):
        for text in texts:
            work(text)
    base = rss()
    for i in range(int(sys.argv[1])):
        work(texts[i % len(texts)])
    grown = rss() - base
    print(grown)
    sys.exit(0 if grown < 4_000_000 else 3)
    """
)


def test_many_calls_in_a_subprocess_neither_crash_nor_grow() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WORKER, "6000"], capture_output=True, text=True, timeout=120
    )
    # A segfault is returncode -11; a leak exits 3 with the growth printed.
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr[-2000:])


# --- what held: linear time on families aimed at the native loops ---------------------------

FAMILIES: dict[str, Callable[[int], str]] = {
    # is_abbreviation reads back over strip marks without counting them
    "strip marks before one dot": repeat("(", tail="a."),
    "strip marks and quoted dots": repeat('((((((((a."'),
    "dots after a long word": repeat("a.'"),
    # phones: the international branch backtracks over groups
    "plus then digits": repeat("+1 (1) 1 1 1 1 1 "),
    "00 then groups": repeat("00 1 1 1 1 "),
    "Arabic-Indic digit groups": repeat("١ "),
    "astral digits": repeat("\U0001d7cf"),
    # emails and URLs
    "a@a@": repeat("a@"),
    "@ then labels": repeat("a.", head="x@"),
    "zero-width local part": repeat("\u200b", head="a", tail="@b.co"),
    "url trailing marks": repeat(".,", head="http://x"),
    "www then @": repeat("www.a@b.co "),
    # placeholders' near misses, tokens
    "<NUM_ near misses": repeat("<NUM_1"),
    "<TRUNCATED_ near misses": repeat("<TRUNCATED_1"),
    "_1 tokens": repeat("_1"),
    "hex and colons": repeat("ab:1:"),
    # quotes and capitalised runs
    "unclosed openers": repeat("“"),
    "capital runs with connectors": repeat("A of "),
    "capitals after skip marks": repeat(' ("', tail="Ab"),
    # numbers
    "comma groups": repeat("1,111"),
    "百分之 runs": repeat("百分之"),
    "percent near misses": repeat("1percen"),
}


def _mask_native(text: str) -> object:
    assert native.READER is not None
    return native.READER.mask(text, {}, {})


READERS: dict[str, Callable[[str], object]] = {"read": read, "mask": _mask_native}


@pytest.mark.parametrize("reader_name", list(READERS))
@pytest.mark.parametrize("family", list(FAMILIES))
def test_native_reading_time_grows_linearly(family: str, reader_name: str) -> None:
    assert_alike_in_linear_time(READERS[reader_name], FAMILIES[family], f"{family}: {reader_name}")


# --- what held: the real API -----------------------------------------------------------------

TASK: dict[str, Any] = {
    "task": "reply_rewrite",
    "comparator": {"kind": "text_conservation", "length_ratio": [0.7, 1.4]},
    "payload_policy": "redacted",
    "keep_agreeing_rate": 1.0,
}


@pytest.fixture
def reply_api(db_url: str) -> Iterator[Api]:
    if not db_url.startswith("sqlite"):
        pytest.skip("SQLite is enough here")
    for api in make_api(db_url):
        with session_scope(api.engine) as session:
            apply_config(session, TASK, actor="test")
        yield api


API_TEXTS = {
    "nul": "退款 a\x00b 138\x000013\x008000 ann@example.com <NUM_1>\x00 no.",
    "digits": "1" * 5000 + " " + "١" * 5000 + " " + "𝟏" * 3000,
    "mixed": ("“" * 3000 + " ann@example.com " + "a.\t" * 3000 + "+86 " * 2000 + "Mr. " * 1000)[
        :32_000
    ],
    "placeholders": "<NUM_1> <NUM_1234567> <TRUNCATED_9> ‹NUM_١> " * 600,
    "too long": "13800138000 " * 4000,
}


@pytest.mark.parametrize("name", list(API_TEXTS))
def test_hostile_texts_through_the_api(reply_api: Api, name: str) -> None:
    text = API_TEXTS[name]
    result = make_result(
        request_id=f"h-{name}",
        task="reply_rewrite",
        input={"text": text},
        edge={"output": text},
        cloud={"output": text + " 好"},
    )
    posted = reply_api.client.post(
        "/v1/results",
        content=json.dumps({"results": [result]}),
        headers={**reply_api.headers("ingest"), "Content-Type": "application/json"},
    )
    assert posted.status_code == 200, posted.text[:500]
    assert posted.json()["accepted"] == 1, posted.text[:500]
    stored = reply_api.client.get(
        f"/v1/results/reply_rewrite/h-{name}", headers=reply_api.headers("read")
    )
    assert stored.status_code == 200
    payload = stored.json()["payload"]
    assert "13800138000" not in json.dumps(payload, ensure_ascii=False)
    assert "ann@example.com" not in json.dumps(payload, ensure_ascii=False)


def test_a_lone_surrogate_is_refused_at_the_door(reply_api: Api) -> None:
    text = "客户 \ud800 ann@example.com"
    result = make_result(
        request_id="h-surrogate",
        task="reply_rewrite",
        input={"text": text},
        edge={"output": text},
        cloud={"output": text},
    )
    posted = reply_api.client.post(
        "/v1/results",
        content=json.dumps({"results": [result]}),
        headers={**reply_api.headers("ingest"), "Content-Type": "application/json"},
    )
    assert posted.status_code == 200
    assert posted.json()["accepted"] == 0
    assert "lone surrogate" in posted.json()["rejected"][0]["error"]
