"""Highlighting on the review page (pure): every difference the comparator names is marked
in both answers, read back from the markdown the page writes."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.compare.comparators import compare
from controlplane.review.blind import blind_diff
from shadowplane_dashboard import locate, reviewing
from tests.dashboard.conftest import shown

TEXT = {"kind": "text_conservation"}
MARKED = re.compile(r":orange-background\[((?:\\.|[^\\\]])*)\]")


def pair(a: Any, b: Any, spec: dict[str, Any] = TEXT, source: Any = "") -> dict[str, Any]:
    """A blind pair item as the claim answers it: A is the edge's answer here (the marks
    read A and B only, see test_marks_do_not_depend_on_which_side_is_the_edge)."""
    diff = blind_diff(compare(spec, a, b).diff, True)
    return {"kind": "pair", "input": {"text": source}, "a": a, "b": b, "diff": diff}


def marked(item: dict[str, Any], side: str) -> list[str]:
    """The pieces of answer `side` the page highlights, as the reader sees them."""
    body = reviewing.highlighted(reviewing.as_text(item[side]), reviewing.marks(item, side))
    return [shown(m) for m in MARKED.findall(body)]


# ---- Found on main: named in "Where they differ", not marked -------------------------


def test_a_number_next_to_chinese_text_is_marked_in_both() -> None:
    item = pair("退款金额为90元，三天内到账。", "退款金额为126元，三天内到账。")
    assert item["diff"]["numbers"]["only_in_a"] == ["90"]
    assert (marked(item, "a"), marked(item, "b")) == (["90"], ["126"])


def test_chinese_numerals_are_marked_where_they_are_written() -> None:
    item = pair("七天内可以退货。", "三十天内可以退货。")
    # The comparator spells them 7 and 30; the texts hold 七 and 三十.
    assert item["diff"]["numbers"]["only_in_a"] == ["7"]
    assert (marked(item, "a"), marked(item, "b")) == (["七"], ["三十"])


def test_a_negation_is_marked_and_the_verb_it_negates_in_the_other() -> None:
    item = pair("You can return it.", "You can't return it.")
    # The comparator spells every English negation "not".
    assert item["diff"]["negations"]["only_in_b"] == ["not"]
    assert (marked(item, "a"), marked(item, "b")) == (["can"], ["can't"])


# ---- Each check of text_conservation, marked in both answers -------------------------

NUMBERS = [
    # (A, B, marked in A, marked in B)
    ("Refund 90 EUR within 14 days.", "Refund 126 EUR within 14 days.", ["90"], ["126"]),
    ("Total: 1,500.50 EUR.", "Total: 1,500.05 EUR.", ["1,500.50"], ["1,500.05"]),
    ("A 5% fee applies.", "A 7 % fee applies.", ["5%"], ["7 %"]),
    ("The fee is 5 percent.", "The fee is 6 percent.", ["5 percent"], ["6 percent"]),
    ("退款两千五百元。", "退款三千元。", ["两千五百"], ["三千"]),
    ("手续费百分之五。", "手续费百分之八。", ["百分之五"], ["百分之八"]),
    ("第三位客户，五到七天内回复。", "第四位客户，五到七天内回复。", ["三"], ["四"]),
    ("１２件商品已发货。", "13件商品已发货。", ["１２"], ["13"]),
    # Digits in an ID, a phone number or an email are not numbers: only the number is.
    ("Order AB-90 ships 3 boxes.", "Order AB-90 ships 4 boxes.", ["3"], ["4"]),
]


@pytest.mark.parametrize(("a", "b", "in_a", "in_b"), NUMBERS, ids=[c[0] for c in NUMBERS])
def test_numbers_only_one_answer_holds_are_marked_in_each(
    a: str, b: str, in_a: list[str], in_b: list[str]
) -> None:
    item = pair(a, b)
    assert "numbers" in item["diff"]["failed"]
    assert (marked(item, "a"), marked(item, "b")) == (in_a, in_b)


def test_numerals_that_are_no_numbers_are_not_marked() -> None:
    # 十分 ("very") and 一起 ("together") hold numerals; 第一时间 ("at once") too.
    item = pair(
        "我们十分抱歉，一起第一时间处理，共七件。", "我们十分抱歉，一起第一时间处理，共八件。"
    )
    assert (marked(item, "a"), marked(item, "b")) == (["七"], ["八"])
    # 7 only in A: the 7 of an ID is not that number.
    item = pair("Ticket Q7-X has 7 items.", "Ticket Q7-X has 8 items.")
    assert (marked(item, "a"), marked(item, "b")) == (["7"], ["8"])


NEGATIONS = [
    ("You can return it.", "You can't return it.", ["can"], ["can't"]),
    ("You cannot return it.", "You can return it.", ["cannot"], ["can"]),
    ("The fee is not refundable.", "The fee is refundable.", ["not"], ["is"]),
    ("We never said that.", "We said that.", ["never"], ["said"]),
    ("There is no fee.", "There is a fee.", ["no"], ["a"]),
    ("七天内不能退货。", "七天内能退货。", ["不"], ["能"]),
    ("我们没有收到您的付款。", "我们收到了您的付款。", ["没有"], ["收"]),
    ("订单未发货。", "订单已发货。", ["未"], ["已"]),
]


@pytest.mark.parametrize(("a", "b", "in_a", "in_b"), NEGATIONS, ids=[c[0] for c in NEGATIONS])
def test_a_negation_one_answer_holds_is_marked_and_what_it_negates_in_the_other(
    a: str, b: str, in_a: list[str], in_b: list[str]
) -> None:
    item = pair(a, b)
    assert item["diff"]["failed"] == ["negations"]
    assert (marked(item, "a"), marked(item, "b")) == (in_a, in_b)


def test_words_holding_a_negation_character_are_not_marked() -> None:
    # 非常 ("very"), 无论 ("whatever"), 对不起 ("sorry") negate nothing.
    item = pair(
        "非常抱歉，无论如何对不起，我们不能退款。", "非常抱歉，无论如何对不起，我们能退款。"
    )
    assert (marked(item, "a"), marked(item, "b")) == (["不"], ["能"])


NAMES = [
    ('Ask "Plan B" today.', 'Ask "Plan C" today.', ['"Plan B"'], ['"Plan C"']),
    ("We met Anna Lee in Berlin.", "We met Anna Lee in Paris.", ["Berlin"], ["Paris"]),
    (
        "Invoice INV-2024-001 is paid.",
        "Invoice INV-2024-002 is paid.",
        ["INV-2024-001"],
        ["INV-2024-002"],
    ),
    (
        "Write to Anna@Example.com now.",
        "Write to bob@example.com now.",
        ["Anna@Example.com"],
        ["bob@example.com"],
    ),
    (
        "See https://a.example/x now.",
        "See https://b.example/y now.",
        ["https://a.example/x"],
        ["https://b.example/y"],
    ),
    (
        "Call +86 138 0013 8000 now.",
        "Call +86 139 0013 8000 now.",
        ["+86 138 0013 8000"],
        ["+86 139 0013 8000"],
    ),
    # A month shortened is the month: "Dec" is marked for December.
    ("Due on Dec. 5 at noon.", "Due on January 5 at noon.", ["Dec."], ["January"]),
    ("请阅读《三体》一书。", "请阅读《球状闪电》一书。", ["《三体》"], ["《球状闪电》"]),
    # Masked values (payload_policy redacted): the diff names them bare.
    ("Write to <EMAIL_1> today.", "Write to <EMAIL_2> today.", ["<EMAIL_1>"], ["<EMAIL_2>"]),
    ("请联系 Anna 处理。", "请联系 Bob 处理。", ["Anna"], ["Bob"]),
]


@pytest.mark.parametrize(("a", "b", "in_a", "in_b"), NAMES, ids=[c[0] for c in NAMES])
def test_named_spans_only_one_answer_holds_are_marked_in_each(
    a: str, b: str, in_a: list[str], in_b: list[str]
) -> None:
    item = pair(a, b)
    assert item["diff"]["failed"] == ["spans"]
    assert (marked(item, "a"), marked(item, "b")) == (in_a, in_b)


def test_sentence_count_and_length_are_notes_with_nothing_to_mark() -> None:
    item = pair("Paid. Shipped. Closed.", "Paid. Shipped and closed.")
    assert item["diff"]["failed"] == ["sentences"]
    assert (marked(item, "a"), marked(item, "b")) == ([], [])
    assert reviewing.differences(item["diff"]) == ["A has 3 sentences, B has 2"]
    # Lengths 2 and 8 + 6 = 14 (a Chinese character counts as a word): outside the bounds
    # both ways round (2 / 14 < 0.7 and 14 / 2 > 1.4), so the blind view shows the check.
    item = pair("谢谢。", "谢谢您的耐心等待，我们马上处理。")
    assert item["diff"]["failed"] == ["length_ratio"]
    assert reviewing.differences(item["diff"]) == [
        "A is 2 words long, B 14 (a number or a Chinese character counts as a word)"
    ]


# ---- Fields, labels, the input ---------------------------------------------------------

INVOICE = {
    "kind": "json_fields",
    "fields": {"amount": "number", "currency": "string", "lines": "array"},
}


def test_differing_fields_are_marked_key_and_value_in_both_json_answers() -> None:
    a = {"amount": 90, "currency": "EUR", "lines": [{"sku": "A1"}]}
    b = {"amount": 126, "currency": "EUR", "lines": [{"sku": "B2"}]}
    item = pair(a, b, INVOICE)
    assert sorted(item["diff"]["fields"]) == ["amount", "lines"]
    # A value over several lines is marked line by line; currency is the same: unmarked.
    assert marked(item, "a") == ['"amount": 90', '"lines": [', "{", '"sku": "A1"', "}", "]"]
    assert marked(item, "b") == ['"amount": 126', '"lines": [', "{", '"sku": "B2"', "}", "]"]
    # An answer that is JSON text is marked in that text.
    item = pair('{"amount":90,"currency":"EUR"}', '{"currency": "EUR", "amount": 126}', INVOICE)
    assert (marked(item, "a"), marked(item, "b")) == (['"amount":90'], ['"amount": 126'])


def test_a_label_is_marked_whole() -> None:
    item = pair("refund", "complaint", {"kind": "label"})
    assert (marked(item, "a"), marked(item, "b")) == (["refund"], ["complaint"])


def input_marked(item: dict[str, Any]) -> list[str]:
    body = reviewing.highlighted(reviewing.as_text(item["input"]), reviewing.input_marks(item))
    return [shown(m) for m in MARKED.findall(body)]


def test_the_input_marks_what_one_answer_holds_and_the_other_lacks() -> None:
    item = pair("七天内可以退货。", "三十天内不可以退货。", source="客户说三十天内可以退货。")
    assert input_marked(item) == ["三十"]
    item = pair({"amount": 90, "currency": "EUR"}, {"amount": 126.5, "currency": "EUR"}, INVOICE)
    item["input"] = {"text": "Total 126.50 EUR, net 90 days."}
    assert input_marked(item) == ["126.50", "90"]


def test_a_long_input_is_marked_in_its_first_characters() -> None:
    cut = reviewing.MAX_INPUT_READ
    head = "Refund 90 EUR. "
    # 90 at the start; 900 across the cut (the part read ends "90"); 90 after the cut.
    source = head + "x" * (cut - len(head) - 3) + " 900 and 90 again."
    assert source[cut - 3 : cut + 1] == " 900"
    item = pair("Pay 90 EUR.", "Pay 126 EUR.", source=source)
    assert input_marked(item) == ["90"]
    assert reviewing.input_marks(item) == [(7, 9)]


# ---- Safe against any text, blind to the sides -----------------------------------------


def test_markup_in_an_answer_is_shown_as_written_with_its_marks() -> None:
    from markdown_it import MarkdownIt

    tail = " [x](http://evil.example) <b>now</b> :red[y] $z$ `c` ![i](http://e/i.png)"
    item = pair("Pay 90 EUR." + tail, "Pay 126 EUR." + tail)
    assert (marked(item, "a"), marked(item, "b")) == (["90"], ["126"])
    for side in ("a", "b"):
        body = reviewing.highlighted(item[side], reviewing.marks(item, side))
        html = MarkdownIt("commonmark").render(body)
        assert not re.search(r"<(a|b|img|code)\b", html), html


def test_places_overlapping_or_over_lines_are_marked_once_per_line() -> None:
    text = "ab]c\\d\n  ef"
    body = reviewing.highlighted(text, [(1, 3), (2, 5), (4, 10), (50, 60), (3, 3)])
    assert [shown(m) for m in MARKED.findall(body)] == ["b]c\\d", "e"]
    assert body.endswith("[e]f")
    assert reviewing.highlighted(text, []) == reviewing.escape(text)


def test_many_numbers_are_marked_up_to_a_bound() -> None:
    item = pair("1 " * 3000, "2 " * 3000)
    assert len(reviewing.marks(item, "a")) == locate.MAX_PLACES


TOKENS = [
    "You", "can", "can't", "not", "never", "return", "it", "90", "126", "5%", "七", "天",
    "三十", "不", "能", "没有", "Anna", "Bob", '"Plan B"', "INV-7", "a@b.com", ".", "。", ",",
]  # fmt: skip
texts = st.lists(st.sampled_from(TOKENS), min_size=1, max_size=14).map(" ".join)


@settings(max_examples=150, deadline=None)
@given(texts, texts)
def test_marks_do_not_depend_on_which_side_is_the_edge(x: str, y: str) -> None:
    """A shows x and B shows y: the same marks whether x is the edge's answer or the
    cloud's (the diff is stored edge against cloud, and rewritten to A and B)."""
    x_is_edge = {"a": x, "b": y, "input": x + y, "diff": blind_diff(compare(TEXT, x, y).diff, True)}
    y_is_edge = {
        "a": x,
        "b": y,
        "input": x + y,
        "diff": blind_diff(compare(TEXT, y, x).diff, False),
    }
    for side in ("a", "b"):
        assert reviewing.marks(x_is_edge, side) == reviewing.marks(y_is_edge, side)
    assert reviewing.input_marks(x_is_edge) == reviewing.input_marks(y_is_edge)
