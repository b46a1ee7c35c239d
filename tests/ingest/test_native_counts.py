"""The compiled counter (`_counts.counts`) gives exactly what conservation's
`sentence_count`, `length` and `negations` give: the same two numbers and the same
Counter (keys in the same order), on every table text of text_conservation and redaction,
the simulator's rewrites, hand-picked cases for each of its branches, and texts drawn
from the readers' alphabets; and its time grows linearly on hostile text."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable

import pytest
from hypothesis import strategies as st

from controlplane.compare import conservation
from controlplane.compare.conservation import length, negations, sentence_count
from controlplane.sim.profiles import REWRITES
from tests.ingest import test_linear_time, test_redaction, test_text_conservation
from tests.ingest.native_support import (
    alike_on,
    any_texts,
    assert_alike_in_linear_time,
    native,
    texts,
)


def compiled(text: str) -> tuple[int, int, Counter[str]]:
    return native("_counts").counts(text)


def assert_same(text: str) -> None:
    got = compiled(text)
    want = (sentence_count(text), length(text), negations(text))
    assert type(got) is tuple and type(got[2]) is Counter
    assert got == want, (text, got, want)
    assert list(got[2].items()) == list(want[2].items()), text  # the same order, too


def test_the_constants_are_conservations() -> None:
    module = native("_counts")
    assert module._CLOSERS == conservation._CLOSERS
    assert module._ABBREVIATIONS == conservation._ABBREVIATIONS
    assert module._NOT_NEGATING_ZH == conservation._NOT_NEGATING_ZH
    assert conservation._NEGATION_ZH.pattern == f"没有|[{module._NEGATION_ZH_CHARS}]"
    assert module._ZH_NUMERAL == conservation._ZH_NUMERAL
    assert module._ZH_DIGIT_CHARS == conservation._ZH_DIGIT_CHARS
    for word, key in module._NEGATION_EN_WORDS.items():
        for spelling in (word, word.capitalize(), word.upper()):
            assert conservation._NEGATION_EN.fullmatch(spelling), spelling
        assert conservation._NEGATION_CANON.get(word, word) == key


TABLE_TEXTS = sorted(
    {
        side
        for case in test_text_conservation.CASES
        for side in (case[1], case[2])
        if isinstance(side, str)
    }
    | {text for text, _ in test_redaction.CASES if isinstance(text, str)}
    | {
        'He said "No." Then he left. 你好。我很好！真的吗？“是的。”',
        "Wait... what? It costs 3.5 dollars. Dr. Who agrees",
        "I can't go. I cannot. I will not. 我不去，他没有来，非常好，别人说。",
        "二〇二六年",
        "二零二六年",
        "2026年",
        "〇",
        "退款2.5万元，百分之三十五点五，第三名，两个人，快一点，三点开会",
        "1,000,000 and 3.5 percent and ３５％",
    }
)


@pytest.mark.parametrize("text", TABLE_TEXTS, ids=range(len(TABLE_TEXTS)))
def test_every_table_text_counts_the_same(text: str) -> None:
    assert_same(text)


def rewrite_texts(seed: int = 7) -> list[str]:
    """Every rewrite template filled in, and long replies joined from them."""
    rng = random.Random(seed)
    values = {
        "amount": 394,
        "amount2": 401,
        "phone": "13644854973",
        "email": "user791@example.com",
        "order": "SO-2037872",
    }
    singles = [t.format(**values) for template in REWRITES for t in template if t]
    longs = []
    for language in ("zh", "en"):
        pool = [t for t in singles if (t[0] > "\u2e80") == (language == "zh")]
        for _ in range(3):
            longs.append(("" if language == "zh" else " ").join(rng.choices(pool, k=40)))
    return singles + longs


def test_the_simulators_rewrites_count_the_same() -> None:
    for text in rewrite_texts():
        assert_same(text)


EDGE_CASES = [
    "",
    " ",
    " \t\n\u3000\x1c",
    "a",
    "中",
    # sentence ends: runs of 。！？!? with their closers
    "a!",
    "a!!?",
    "a?!。！？b",
    'a!" b',
    "a!”’」』》）)]】b",
    '!"!',
    "。",
    "你好。我很好！真的吗？",
    "“是的。”",
    # "." followed by whitespace, the end or a closer; not by "." or anything else
    "a.",
    "a. b",
    "a.b",
    "a.\tb",
    "a.\u3000b",
    "a.\u00a0b",
    "a.\x1cb",
    'a." b',
    "a.) b",
    "a.] b",
    "a.】b",
    "a.’b",
    "a.,b",
    ". a",
    " . ",
    "..",
    # ellipses: pauses, unless they close the text
    "a..",
    "a... b",
    "a...",
    "a....",
    "a. . .",
    "Wait... what?",
    "…",
    "a…",
    "a…… b",
    # numbers closing a sentence, and dots inside them
    "It costs 35. Then",
    "35.",
    "35.%",
    "3.5 dollars.",
    "1,000. x",
    "１２．",
    "1.. x",
    # abbreviations: back to the previous space within 12 characters
    "Mr. Smith",
    "mr. smith",
    "MR. X",
    "Mrs. X",
    "e.g. this",
    "i.e. that",
    "E.G. that",
    "J. Smith",
    "Dr.Who. x",
    "approx. 5",
    "Approx. 5",
    "approxx. 5",
    "Sept. 5",
    "Sepx. 5",
    "Thurs. x",
    "U.S. x",
    'Jan."x',
    "Jan.' x",
    "(Mr. X",
    "“Mr. X",
    "‘Mr. X",
    "（Mr. X",
    "\"'(Mr. X",
    ".Mr. x",
    "x.Mr. y",
    "((J. x",
    "(.J. x",
    ".(J. x",
    "a (J. x",
    'a "(((J. x',
    'Mr."',
    "J.",
    "J. ",
    "Mr 5. x",
    "5Mr. x",
    "_J. x",
    "M-r. x",
    "hello world Mr. x",
    "abcdefghijklmnop. x",
    "ab" * 10 + ". x",
    "12345678901Mr. x",
    "123456789012Mr. x",
    "1234567890123Mr. x",
    "x 1234567890Mr. x",
    "x 12345678901Mr. x",
    '"' * 30 + "a. x",
    '"' * 30 + "Mr. x",
    '"' * 30 + ".Mr. x",
    "." * 30 + "Mr. x",
    "a.b.c.d.e.f. x",
    "a.b.c.d.e.f.g. x",
    "e.t.c. x",
    "é. x",
    "İ. x",
    "\u212a. x",  # KELVIN SIGN: lower() is "k"
    "ǅ. x",
    "Ⅻ. x",
    "Ｊ. x",
    "ｍｒ. x",
    "Mé. x",
    "  Mr. x  ",
    " \tJ. x",
    # length: Latin words with apostrophe joins, digit runs, CJK, Chinese number runs
    "don't",
    "don’t",
    "rock'n'roll",
    "x'",
    "'x",
    "a'b'c",
    "a'é",
    "é'a",
    "Ã'b",
    "a''b",
    "a'1",
    "×",
    "÷",
    "a×b",
    "ÀÿĀɏ",
    "ɐ",
    "1,000.5%",
    "１２３％",
    "1%%",
    "1 %",
    "1,",
    ",1",
    "1ａ",
    "1a",
    "a1",
    "٣",
    "中文",
    "㐀䶿豈﫿",
    "〇",
    "二〇二六年",
    "百分之五",
    "百分之",
    "百分之点",
    "百分之〇",
    "百分之百分之五",
    "一点五",
    "一点",
    "点五",
    "一点点五",
    "三百五十",
    "百分之二点五",
    "五百分之三",
    # English negations: each word in its three spellings, and near misses
    *(
        spelling
        for word in (
            "no not none nothing nobody nowhere nor never neither without cannot unable"
        ).split()
        for spelling in (word, word.capitalize(), word.upper(), word[:-1] + word[-1].upper())
    ),
    "nOt",
    "NoT",
    "NOt",
    "n't",
    "n’t",
    "N'T",
    "N't",
    "can't",
    "don’t",
    "didn't go",
    "won't",
    "n'",
    "n't1",
    "n'tx",
    "n't’",
    "n't_",
    "x n't",
    "xcannot",
    "_not",
    "1not",
    "×not",
    "÷cannot",
    "x'not",
    "a’not",
    "x'n't",
    "a'cannot",
    "notx",
    "not1",
    "not_",
    "noé",
    "no中",
    "中not",
    "énot",
    "piano",
    "announce",
    "nowhere,",
    "neither.",
    "nothingness",
    "nonono",
    "no-no",
    "no\u200bno",
    # Chinese negations: each character, 没有, and the words that only contain them
    *"不没无未非别莫勿否",
    *conservation._NOT_NEGATING_ZH,
    "没有",
    "有没有",
    "没没有有",
    "不得",
    "不得不过",
    "特别人",
    "无论无",
    "非常非",
    "是否则",
    "别别人",
    "否则否",
    "不不不",
    "莫名其妙",
    "差不",
    "了不",
    "对不起不",
    "除非常",
    "not不",
    "不not",
    # mixed
    "I can't go. 我不去，他没有来。Not now!",
]

CONTEXTS = [("", ""), (" ", " "), ("a", "b"), ("中", "文"), (".", "."), ("x ", ". "), ("1", "1")]


@pytest.mark.parametrize("text", EDGE_CASES, ids=range(len(EDGE_CASES)))
def test_every_branch_counts_the_same(text: str) -> None:
    for before, after in CONTEXTS:
        assert_same(before + text + after)


test_drawn_texts_count_the_same = alike_on(texts, assert_same)


test_any_texts_count_the_same = alike_on(any_texts, assert_same)


# Dense near misses: sentence ends and abbreviations, apostrophes and negation words.
sentence_texts = st.text(alphabet='a.J M r"(“ \t!。x1', max_size=30)
word_texts = st.text(alphabet="no't’NxC×1 _é中", max_size=20)
zh_texts = st.text(alphabet="一百分之点〇不得没有差多别人特", max_size=20)


test_near_misses_count_the_same = alike_on(
    st.one_of(sentence_texts, word_texts, zh_texts), assert_same
)


# Hostile inputs: all of test_linear_time's families, and near misses of each branch here
# (the abbreviation's read back to the previous space, with none in sight).
repeat = test_linear_time.repeat


def quotes_then(unit: str) -> Callable[[int], str]:
    """Half the text opening quotes (an abbreviation reads back over them), then units."""

    def build(n: int) -> str:
        return '"' * (n // 2) + (unit * (n // len(unit) + 1))[: n - n // 2]

    return build


FAMILIES: dict[str, Callable[[int], str]] = {
    **{
        name: build
        for name, build in test_linear_time.FAMILIES.items()
        if name.startswith(
            ("sentences", "negations", "numbers", "digits", "mixed", "capitalised", "quotes")
        )
        or name in ("email: letters then @", "token: a1:a1:", "token: 1_1_1_")
    },
    "sentences: a.' a.' (abbreviations, no space)": repeat("a.'"),
    "sentences: a.\t (abbreviations, no space)": repeat("a.\t"),
    'sentences: "a." (abbreviations, no space)': repeat('"a.'),
    "sentences: quotes then a.'": quotes_then("a.'"),
    "sentences: quotes then J. ": quotes_then("J.\t"),
    "sentences: dots then a.": repeat(".", tail="a."),
    "sentences: ..a": repeat("..a"),
    'sentences: !"': repeat('!"'),
    "length: a'a'": repeat("a'"),
    "length: é'": repeat("é'"),
    "length: 1,1,": repeat("1,"),
    "length: 百分百分": repeat("百分"),
    "negations: n't": repeat("n't"),
    "negations: n'n'": repeat("n'"),
    "negations: cannot": repeat("cannot"),
    "negations: ×n×n": repeat("×n"),
    "negations: 不得不得": repeat("不得"),
    "negations: 差不差不": repeat("差不"),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_counting_grows_linearly(family: str) -> None:
    assert_alike_in_linear_time(
        compiled, FAMILIES[family], family, alike=assert_same, collect=False
    )
