"""The compiled number reader (`_numbers.numbers`) gives exactly what `conservation.numbers`
gives: the same Counter, keys in the same order, on every table text of text_conservation
and redaction, the Chinese numeral table, hand-picked cases for each of its branches, and
texts drawn from the readers' alphabets; and its time grows linearly on hostile text."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
from hypothesis import strategies as st

from controlplane.compare.conservation import numbers, spans
from tests.ingest import test_linear_time, test_text_conservation
from tests.ingest.native_support import (
    alike_on,
    any_texts,
    assert_alike_in_linear_time,
    native,
    table_texts,
    texts,
)


def compiled(text: str) -> Counter[str]:
    return native("_numbers").numbers(text)


def assert_same(text: str) -> None:
    got, want = compiled(text), numbers(text)
    assert type(got) is Counter
    assert got == want, (text, got, want)
    assert list(got.items()) == list(want.items()), text  # the same order, too


def assert_same_read(text: str) -> None:
    """The text itself, and its rest once its spans are blanked (what read() passes)."""
    assert_same(text)
    assert_same(spans(text).rest)


TABLE_TEXTS = table_texts(
    "退款2.5万元，百分之三十五点五，第三名，两个人，快一点，三点开会",
    "1,000,000 and 3.5 percent and ３５％",
    "二〇二六" * 2_000 + "年，共 " + "1" * 5_000 + " 件，另 3 件",
    "1" * 4_300,
)


@pytest.mark.parametrize("text", TABLE_TEXTS, ids=range(len(TABLE_TEXTS)))
def test_every_table_text_reads_the_same_numbers(text: str) -> None:
    assert_same_read(text)


# test_chinese_numerals' table: each numeral alone, measured, ordinal, in a range, as a
# percentage both ways, with a fraction, and after digits.
NUMERALS = [text for text, _ in test_text_conservation.test_chinese_numerals.pytestmark[0].args[1]]


@pytest.mark.parametrize("numeral", NUMERALS)
def test_the_chinese_numeral_table_reads_the_same(numeral: str) -> None:
    for text in (
        numeral,
        numeral + "个",
        "第" + numeral,
        numeral + "到" + numeral,
        "百分之" + numeral,
        numeral + "%",
        numeral + " percent",
        numeral + "点五",
        "3" + numeral,
        numeral + "万",
        "一" + numeral,
    ):
        assert_same(text)


EDGE_CASES = [
    "",
    " ",
    "abc",
    "中文",
    # plain integers: leading zeros, zero, 28 digits and one more, 万/亿 after them
    "0",
    "000",
    "007",
    "0万",
    "00亿",
    "12万",
    "3亿",
    "9" * 28,
    "9" * 29,
    "0" * 30 + "1",
    "1" * 4_301,
    # MAX_DIGITS: the length read, with its commas left out and its point counted
    "1" * 4_300 + "%",
    "1." + "1" * 4_298,
    "1." + "1" * 4_299,
    "1,000," + "0" * 4_300,
    "1,000,000." + "5" * 4_293,
    "1,000,000." + "5" * 4_294,
    "百分之" + "1" * 4_300,
    "百分之" + "1" * 4_301,
    "百分之1." + "1" * 4_298,
    "百分之1." + "1" * 4_299,
    "二" * 4_300,
    "二" * 4_301,
    "5万元 and 5亿",
    # \d is any decimal digit: Arabic-Indic, Devanagari, full-width (translated), mixed
    "١٢٣",
    "١٢٣٤٥٦٧٨٩٠١٢٣٤٥٦٧٨٩٠١٢٣٤٥٦٧٨٩٠",
    "1١2",
    "९९%",
    "٣.٥ percent",
    "１２３",
    "１，２３４．５％",
    "１2３",
    "𝟙𝟚",  # mathematical digits: Nd too
    "²³",  # superscripts: isdigit() but not \d
    "Ⅻ",
    # comma groups: the comma branch, and its failures falling back to the plain one
    "1,000",
    "1,000,000",
    "12,345,678.90",
    "1,0000",
    "12,345,67",
    "1234,567",
    "1,23",
    "1,",
    ",000",
    "1,000,",
    "1,000.",
    "1,000.5万",
    "999,999亿",
    "1,٠٠٠",
    "1,000 000",
    # decimals
    "3.5",
    "3.",
    "3..5",
    ".5",
    "0.50",
    "1.0",
    "1.000",
    "10.5万",
    "2.5亿",
    "1." + "0" * 4_400,
    "1.2.3",
    "1.2,345",
    # decimals spelt here (at most 28 digits with 万/亿's zeros) and by conservation
    "0.00001万",
    "1,000.5万",
    "12.5亿",
    "1" * 24 + ".5万",
    "1" * 23 + ".5万",
    "1" * 20 + ".5亿",
    "1" * 19 + ".5亿",
    "0." + "0" * 27 + "1",
    "0." + "0" * 28 + "1",
    "9" * 27 + "." + "9",
    "9" * 28 + "." + "9",
    "１２.５０",
    "١٢.٥٠",
    "١" * 24 + "万",
    "١" * 25 + "万",
    "百分之" + "9" * 27 + ".5",
    "百分之" + "9" * 28 + ".5",
    "百分之١٢.٥",
    # percent: \s? only when the rest follows, percent / per cent any case, then \b
    "5%",
    "5 %",
    "5  %",
    "5\t%",
    "5\u3000%",
    "5\u00a0%",
    "5 percent",
    "5percent",
    "5 PERCENT",
    "5 PerCent.",
    "5 per cent",
    "5 per  cent",
    "5 percentage",
    "5 percent_",
    "5 percent2",
    "5 percent中",
    "5 per cents",
    "5 perc",
    "5万%",
    "5万 percent",
    "5 万%",
    "5%%",
    "5 ％",
    "百分之五 percent",
    "五%",
    "五 %",
    "五 percent",
    "三十 per cent",
    # 百分之: a numeral, a number, or neither (then 百 is a numeral)
    "百分之",
    "百分之五",
    "百分之三十五点五",
    "百分之12",
    "百分之12.5",
    "百分之1,000",
    "百分之007",
    "百分之١٢",
    "百分之 5",
    "百分之x",
    "百分之%",
    "百分之十分",
    "百分之一起",
    "百分百分之五",
    # Chinese numerals: runs, 点 fractions, unreadable runs
    "三百",
    "两千五",
    "一万二",
    "一千零五",
    "二〇二六年",
    "一亿二千万",
    "一点五",
    "三点",
    "三点开会",
    "五点零",
    "五点十",
    "点五",
    "三三",
    "十十",
    "一二三四五六七八九十百千万亿",
    "一亿一亿",
    "万亿",
    "亿万",
    "一万零",
    "一万〇二",
    "零",
    "〇",
    "两",
    "零零七",
    "二" * 29,
    "二" * 28,
    "一亿二",
    "一万十",
    "九千九百九十九亿九千九百九十九万九千九百九十九",
    # lone numerals: measure words, 一点, ranges, 第
    "三个",
    "一个",
    "一点",
    "两点",
    "快一点",
    "一起",
    "一样",
    "三天",
    "三到五天",
    "3至五",
    "五~3",
    "三－四",
    "三、四",
    "三、x",
    "x、三",
    "、三",
    "到三",
    "3到三",
    "第三",
    "第 三",
    "三",
    "三x",
    "x三",
    "三,",
    "三点五个",
    # the words that hold numerals without being numbers, and their lookbehinds
    "一起一样一些一直一定一般一切一旦一律一致一向一下",
    "一点儿一点点一会儿一边一面一同一共统一唯一之一一一不一",
    "第一时间三心二意一路一生一心一再一贯",
    "万一",
    "万分",
    "三万一",
    "点万一",
    "十分",
    "三十分",
    "点十分",
    "x十分",
    "千万",
    "一千万",
    "点千万",
    "第一时",
    "三心二",
    "一点儿三个",
    "一一一",
    "统一一个",
    "三一起",
    "一起三",
    "三万分",
    "万万一",
    "十十分",
    "第一时间三个",
    "三心二意个",
    "一会",
    "之一个",
    # blanking shifts positions: later lookups read the blanked body
    "一起三个",
    "到一起三",
    "三一样个",
    "一样到三",
    "5一起到三",
    # mixed scripts and punctuation
    "退款2.5万元，百分之三十五点五，第三名，两个人，快一点，三点开会",
    "订单 AB12 的 3 件商品预计三到五天送达，运费5元。",
    "Pay 1,234.50 USD (5% off) by Dec 3rd; call 138 0013 8000.",
]


@pytest.mark.parametrize("text", EDGE_CASES, ids=range(len(EDGE_CASES)))
def test_every_branch_reads_the_same(text: str) -> None:
    assert_same(text)
    for before, after in ((" ", " "), ("a", "b"), ("一", "个"), ("第", "%"), ("3", "5")):
        assert_same(before + text + after)


test_drawn_texts_read_the_same = alike_on(texts, assert_same_read)


test_any_texts_read_the_same = alike_on(any_texts, assert_same_read)


# The numerals alone, and the digits with their separators and suffixes: the native
# Chinese integer reader and the comma, decimal and percent branches, densely.
numeral_texts = st.text(alphabet="〇零一二两三四五六七八九十百千万亿点个第到", max_size=24)
digit_texts = st.text(alphabet="0123456789١,.%万亿 pPeErRcCnNtT_x", max_size=24)


test_numeral_runs_read_the_same = alike_on(numeral_texts, assert_same)


test_digit_runs_read_the_same = alike_on(digit_texts, assert_same)


# Hostile inputs: test_linear_time's number families, and near misses of each branch here.
repeat = test_linear_time.repeat
FAMILIES: dict[str, Callable[[int], str]] = {
    **{
        name: build
        for name, build in test_linear_time.FAMILIES.items()
        if name.startswith(("numbers", "digits", "mixed"))
    },
    "comma groups that never close: 1,00": repeat("1,00"),
    "comma after four digits: 1234,567": repeat("1234,567"),
    "decimal points: 1.1.": repeat("1.1."),
    "one long decimal": repeat("0", head="1."),
    "percent near misses: 5 per cen": repeat("5 per cen"),
    "percent spellings: 5 percent": repeat("5 percent "),
    "百分之 then nothing: 百分之x": repeat("百分之x"),
    "百分之 then digits": repeat("百分之1"),
    "lone numerals in ranges: 三到": repeat("三到"),
    "numeral fractions: 一点一点一": repeat("点一", head="一"),
    "not-numbers: 万一万一": repeat("万一"),
    "not-numbers: 一点儿": repeat("一点儿"),
    "not-numbers nearly: 第一时": repeat("第一时"),
    "full-width groups: １，０００": repeat("１，０００"),
    "digit-by-digit numerals: 二〇二六": repeat("二〇二六"),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_reading_numbers_grows_linearly(family: str) -> None:
    assert_alike_in_linear_time(compiled, FAMILIES[family], family, alike=assert_same)
