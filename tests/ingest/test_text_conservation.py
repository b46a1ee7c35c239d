"""text_conservation, table-driven in Chinese and English, with the traps; and its readers."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.compare.comparators import compare
from controlplane.compare.conservation import (
    chinese_number,
    length,
    negations,
    numbers,
    read,
    sentence_count,
    sentences,
    spans,
)

# Runs once with each reader (the text_reader parameter, tests/conftest.py).
pytestmark = pytest.mark.text_reader

SPEC: dict[str, Any] = {"kind": "text_conservation", "length_ratio": [0.7, 1.4]}

# (why, edge, cloud, expected outcome, the checks expected to fail)
CASES: list[tuple[str, Any, Any, str, set[str]]] = [
    # --- faithful rewrites: agree -----------------------------------------------------
    (
        "en: same text",
        "Your refund of $35 was sent today.",
        "Your refund of $35 was sent today.",
        "agree",
        set(),
    ),
    (
        "en: different wording, same content",
        "We have sent your refund of $35 today.",
        "Your refund of $35 was sent today.",
        "agree",
        set(),
    ),
    (
        "en: colloquial to formal",
        "We cannot ship the order before Monday.",
        "We can't ship your order before Monday.",
        "agree",
        set(),
    ),
    (
        "en: do not vs don't",
        "Please do not reply to this email.",
        "Please don't reply to this email.",
        "agree",
        set(),
    ),
    (
        "en: thousands separator",
        "The invoice total is 2,500 dollars.",
        "The invoice total is 2500 dollars.",
        "agree",
        set(),
    ),
    (
        "en: percent spelled out",
        "The fee is 5 percent of the price.",
        "The fee is 5% of the price.",
        "agree",
        set(),
    ),
    (
        "en: 3.50 is 3.5",
        "It costs 3.50 euros per month.",
        "It costs 3.5 euros per month.",
        "agree",
        set(),
    ),
    (
        "en: reordered sentences",
        "The parcel left Berlin on Monday. It arrives in 3 days.",
        "It arrives in 3 days. The parcel left Berlin on Monday.",
        "agree",
        set(),
    ),
    (
        "en: quoted answer keeps its sentence",
        'He said "No." Then he left the store.',
        'He said "No." Then he walked out of the store.',
        "agree",
        set(),
    ),
    (
        "en: ellipsis is a pause",
        "Well... we shipped it on time.",
        "Well… we shipped it on time.",
        "agree",
        set(),
    ),
    (
        "en: abbreviations do not end sentences",
        "Mr. Lee paid 3.5 dollars, e.g. by card.",
        "Mr. Lee paid 3.5 dollars, for example by card.",
        "agree",
        set(),
    ),
    (
        "en: the same ID and email",
        "Order AB-1234 was confirmed to ann@example.com.",
        "Confirmed order AB-1234 to ann@example.com.",
        "agree",
        set(),
    ),
    ("zh: same text", "您的退款已于今天退回。", "您的退款已于今天退回。", "agree", set()),
    (
        "zh: different wording, same content",
        "退款已经在今天退还给您了。",
        "您的退款已于今天退回。",
        "agree",
        set(),
    ),
    ("zh: 三百 vs 300", "本次共退款三百元。", "本次共退款300元。", "agree", set()),
    ("zh: 两千五百 vs 2,500", "合同金额为两千五百元。", "合同金额为2,500元。", "agree", set()),
    ("zh: 两千五 vs 2500", "合同金额为两千五。", "合同金额为2500。", "agree", set()),
    ("zh: 百分之五 vs 5%", "手续费是百分之五。", "手续费是5%。", "agree", set()),
    ("zh: 一点五 vs 1.5", "预计需要一点五小时。", "预计需要1.5小时。", "agree", set()),
    ("zh: full-width digits", "订单数量为１２件。", "订单数量为12件。", "agree", set()),
    (
        "zh: 一起 and 一样 are not numbers",
        "我们一起处理，结果一样。",
        "我们共同处理，结果相同。",
        "agree",
        set(),
    ),
    ("zh: 非常 is not a negation", "这个方案非常好。", "这个方案很好。", "agree", set()),
    (
        "zh: reordered sentences",
        "包裹已经发出。预计三天到达。",
        "预计3天到达。包裹已经发出。",
        "agree",
        set(),
    ),
    ("zh: 没有 and 没 are one negation", "他今天没来上班。", "他今天没有来上班。", "agree", set()),
    (
        "mixed: same names and numbers",
        "请联系 Acme Corp 的客服，电话 400-800-1234。",
        "请致电 Acme Corp 客服 400-800-1234。",
        "agree",
        set(),
    ),
    (
        "en: a greeting changes, the name stays",
        "Hi John, thanks for reaching out! Your order #4821 shipped on Monday and should arrive "
        "by Friday. Let us know if anything else comes up.",
        "Dear John, thank you for contacting us. Your order #4821 was shipped on Monday and is "
        "expected to arrive by Friday. Please let us know if you need anything else.",
        "agree",
        set(),
    ),
    (
        "en: unable is a negation",
        "We are unable to process refunds after 30 days. Please contact support@acme.com for exceptions.",
        "Refunds cannot be processed after 30 days. For exceptions, please email support@acme.com.",
        "agree",
        set(),
    ),
    (
        "en: 3pm and 5th are numbers, not IDs",
        "The meeting is at 3pm on March 5th in Room 204.",
        "The meeting will take place at 3 pm on March 5 in Room 204.",
        "agree",
        set(),
    ),
    (
        "zh: a range in numerals and digits",
        "您好，您的订单已经发货了，预计三到五天送达，请注意查收。",
        "您好，您的订单已发货，预计3至5天内送达，请留意查收。",
        "agree",
        set(),
    ),
    (
        "en: Dec. is December",
        "Your subscription will renew on 1 Dec. 2026 unless you cancel before then.",
        "Unless you cancel beforehand, your subscription renews on December 1, 2026.",
        "agree",
        set(),
    ),
    (
        "zh: 没有 and 暂无 are one negation each",
        "亲，目前这款手机壳没有库存了，预计下周一补货哦~",
        "您好，该款手机壳目前暂无库存，预计下周一补货。",
        "agree",
        set(),
    ),
    (
        "en: no and not are one negation each",
        "There is no stock left in Berlin.",
        "The item is not in stock in Berlin.",
        "agree",
        set(),
    ),
    (
        "en: the greeting stays, the name changes",
        "Dear Jon, your order #4821 shipped on Monday.",
        "Dear John, your order #4821 shipped on Monday.",
        "conflict",
        {"spans"},
    ),
    (
        "zh: a range that changed",
        "预计三到七天送达。",
        "预计3至5天内送达。",
        "conflict",
        {"numbers"},
    ),
    (
        "en: a million is a number, not a phone",
        "It costs 1000000 dollars.",
        "It costs 1,000,000 dollars.",
        "agree",
        set(),
    ),
    (
        "zh: a number after an order ID",
        "订单 SO-2037872 预计三天内送达。",
        "订单 SO-2037872 预计3天内送达。",
        "agree",
        set(),
    ),
    # --- meaning changed: conflict -------------------------------------------------------
    (
        "en: a number after an ID",
        "Order AB-1234 costs 35 dollars.",
        "Order AB-1234 costs 36 dollars.",
        "conflict",
        {"numbers"},
    ),
    (
        "en: dropped not",
        "We can ship the order before Monday.",
        "We cannot ship the order before Monday.",
        "conflict",
        {"negations"},
    ),
    (
        "en: can't vs can",
        "I can help you with this request.",
        "I can't help you with this request.",
        "conflict",
        {"negations"},
    ),
    (
        "en: added never",
        "The package will never arrive late.",
        "The package will arrive late.",
        "conflict",
        {"negations"},
    ),
    (
        "en: 3.5 vs 35",
        "The fee is 3.5 dollars per month.",
        "The fee is 35 dollars per month.",
        "conflict",
        {"numbers"},
    ),
    (
        "en: 3.5% vs 35%",
        "Interest rises by 3.5% next year.",
        "Interest rises by 35% next year.",
        "conflict",
        {"numbers"},
    ),
    (
        "en: 5 vs 5%",
        "The fee is 5 of the price.",
        "The fee is 5% of the price.",
        "conflict",
        {"numbers"},
    ),
    (
        "en: sentence merged into another",
        "The parcel left Berlin on Monday and arrives in 3 days.",
        "The parcel left Berlin on Monday. It arrives in 3 days.",
        "conflict",
        {"sentences"},
    ),
    (
        "en: swapped entity that looks alike",
        "Acme Group will refund the order.",
        "Acme Corp will refund the order.",
        "conflict",
        {"spans"},
    ),
    (
        "en: a different order ID",
        "Order AB-1235 was confirmed.",
        "Order AB-1234 was confirmed.",
        "conflict",
        {"spans"},
    ),
    (
        "en: a different email",
        "Write to anne@example.com for help.",
        "Write to ann@example.com for help.",
        "conflict",
        {"spans"},
    ),
    (
        "en: far too short",
        "Refund sent.",
        "Your refund of the full amount was sent to your original payment method today.",
        "conflict",
        {"length_ratio"},
    ),
    (
        "en: padded",
        "Your refund was sent. It was sent today, as we promised, and we really hope "
        "that you are happy with it now.",
        "Your refund was sent. It was sent today.",
        "conflict",
        {"length_ratio"},
    ),
    ("zh: dropped 不", "这个产品支持退货。", "这个产品不支持退货。", "conflict", {"negations"}),
    ("zh: 未 vs nothing", "订单已发货。", "订单未发货。", "conflict", {"negations"}),
    ("zh: 三百 vs 三千", "本次共退款三百元。", "本次共退款三千元。", "conflict", {"numbers"}),
    (
        "zh: 《三体》 vs 《三国》",
        "推荐您阅读《三体》。",
        "推荐您阅读《三国》。",
        "conflict",
        {"spans"},
    ),
    (
        "zh: a sentence merged",
        "包裹已经发出，预计三天到达。",
        "包裹已经发出。预计三天到达。",
        "conflict",
        {"sentences"},
    ),
    (
        "zh: a quoted name changed",
        "请联系“张三”处理。",
        "请联系“李四”处理。",
        "conflict",
        {"spans"},
    ),
    (
        "mixed: a dropped 没有 and a changed number",
        "他有收到2件包裹。",
        "他没有收到3件包裹。",
        "conflict",
        {"negations", "numbers"},
    ),
    # --- not a text: invalid (edge) or conflict (broken reference) ----------------------
    ("edge not a string", {"text": "hi"}, "hi", "invalid", set()),
    ("edge empty", "   ", "Your refund was sent.", "invalid", set()),
    ("cloud not a string", "Your refund was sent.", None, "conflict", set()),
]


@pytest.mark.parametrize(
    ("why", "edge", "cloud", "expected", "failed"), CASES, ids=[c[0] for c in CASES]
)
def test_text_conservation(
    why: str, edge: Any, cloud: Any, expected: str, failed: set[str]
) -> None:
    comparison = compare(SPEC, edge, cloud)
    assert comparison.outcome == expected, comparison.diff
    assert comparison.version == 1
    if expected == "agree":
        assert comparison.diff is None
    elif failed:
        assert comparison.diff is not None
        assert set(comparison.diff["failed"]) == failed, comparison.diff


def test_there_are_at_least_forty_cases_in_both_languages() -> None:
    assert len(CASES) >= 40
    assert sum(c[0].startswith("zh") for c in CASES) >= 15
    assert sum(c[0].startswith("en") for c in CASES) >= 15


def test_the_diff_names_every_failed_check_with_both_sides() -> None:
    diff = compare(SPEC, "他有收到2件包裹。", "他没有收到3件包裹。").diff
    assert diff == {
        "failed": ["negations", "numbers"],
        "negations": {"edge": [], "cloud": ["没"], "missing": ["没"], "extra": []},
        "numbers": {"edge": ["2"], "cloud": ["3"], "missing": ["3"], "extra": ["2"]},
    }
    length = compare(SPEC, "Refund sent.", "Your refund was sent to your card today.").diff
    assert length is not None
    assert length["length_ratio"] == {"edge": 2, "cloud": 8, "ratio": 0.25, "bounds": [0.7, 1.4]}


def test_length_ratio_bounds_come_from_the_config() -> None:
    short, full = "Refund sent today.", "Your refund was sent today."
    assert compare(SPEC, short, full).outcome == "conflict"
    loose = {"kind": "text_conservation", "length_ratio": [0.5, 2.0]}
    assert compare(loose, short, full).outcome == "agree"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("三百", "300"),
        ("两千五百", "2500"),
        ("两千五", "2500"),
        ("三百五", "350"),
        ("十五", "15"),
        ("二十", "20"),
        ("一万二", "12000"),
        ("一千零五", "1005"),
        ("一点五", "1.5"),
        ("二〇二六", "2026"),
        ("一亿二千万", "120000000"),
        ("十", "10"),
    ],
)
def test_chinese_numerals(text: str, value: str) -> None:
    number = chinese_number(text)
    assert number is not None and format(number.normalize(), "f") == value


def test_number_reader() -> None:
    assert numbers("退款2.5万元，百分之三十五点五，第三名，两个人，快一点，三点开会") == Counter(
        {"25000": 1, "35.5%": 1, "3": 2, "2": 1}
    )
    assert numbers("1,000,000 and 3.5 percent and ３５％") == Counter(
        {"1000000": 1, "3.5%": 1, "35%": 1}
    )


def test_sentence_reader() -> None:
    assert len(sentences('He said "No." Then he left. 你好。我很好！真的吗？“是的。”')) == 6
    assert len(sentences("Wait... what? It costs 3.5 dollars. Dr. Who agrees")) == 3


def test_negation_reader() -> None:
    assert negations(
        "I can't go. I cannot. I will not. 我不去，他没有来，非常好，别人说。"
    ) == Counter({"not": 3, "不": 1, "没": 1})


def test_span_reader() -> None:
    found = spans(
        "Acme Corp sent 《三体》 to “张三” at Bob@X.com; see https://x.io/a. "
        "The order INV-22 is late. Please call Bank of America."
    ).named
    assert found == {
        "Acme Corp",
        "《三体》",
        "“张三”",
        "bob@x.com",
        "https://x.io/a",
        "INV-22",
        "Bank of America",
    }


texts = st.text(
    alphabet=st.sampled_from(
        list("abcXYZ 0123456789.,!?%'\"-@不没有三百两千五点万。！？《》“”非常一起")
    ),
    max_size=200,
)


@settings(max_examples=300)
@given(texts)
def test_any_text_agrees_with_itself(text: str) -> None:
    expected = "agree" if text.strip() else "invalid"
    assert compare(SPEC, text, text).outcome == expected


@settings(max_examples=200)
@given(texts)
def test_reading_is_deterministic(text: str) -> None:
    assert read(text) == read(text)


@settings(max_examples=300)
@given(texts)
def test_sentence_count_is_the_number_of_sentences(text: str) -> None:
    assert sentence_count(text) == len(sentences(text))


@settings(max_examples=300)
@given(st.text(max_size=300), st.text(max_size=300))
def test_any_two_texts_get_an_outcome_and_a_diff_that_names_the_failures(
    edge: str, cloud: str
) -> None:
    comparison = compare(SPEC, edge, cloud)
    assert comparison.outcome in ("agree", "conflict", "invalid")
    if comparison.outcome == "conflict" and comparison.diff and "failed" in comparison.diff:
        assert set(comparison.diff["failed"]) <= {
            "sentences",
            "length_ratio",
            "negations",
            "numbers",
            "spans",
        }
        assert all(name in comparison.diff for name in comparison.diff["failed"])


tokens = st.sampled_from(
    ["the", "order", "AB-1234", "SO-2037872", "2026-11-30", "预计", "天", "x1y2", "，", "."]
)


@settings(max_examples=300)
@given(
    st.lists(tokens, max_size=8),
    st.integers(0, 10**6),
    st.lists(tokens, max_size=8),
    st.sampled_from([" ", ""]),
)
def test_a_standalone_number_is_always_read(
    before: list[str], number: int, after: list[str], glue: str
) -> None:
    # Whatever IDs or dates stand around it, a number set apart by spaces is read.
    text = glue.join(before) + f" {number} " + glue.join(after)
    assert numbers(spans(text).rest)[str(number)] >= 1, text


def test_numbers_too_long_to_be_numbers_are_not_read_and_never_raise() -> None:
    # 8,000 numeral digits used to raise ValueError (Python's int() digit limit).
    reading = read("二〇二六" * 2_000 + "年，共 " + "1" * 5_000 + " 件，另 3 件")
    assert reading.numbers == Counter({"3": 1})
    assert numbers("1" * 4_300) == Counter({"1" * 28 + "0" * 4_272: 1})  # Decimal's 28 digits


def test_the_zero_numeral_is_part_of_its_number_in_length() -> None:
    assert length("二〇二六年") == length("二零二六年") == length("2026年") == 2
    assert length("〇") == 1


def test_quoted_spans_hold_1_to_200_characters_up_to_the_first_closing_mark() -> None:
    assert spans("“" + "a" * 200 + "”").named == {"“" + "a" * 200 + "”"}
    assert spans("“" + "a" * 201 + "”").named == frozenset()
    assert spans("“”“b”").named == {"“b”"}
    assert spans('""x" 「y」 《z》 『w』').named == {'"x"', "「y」", "《z》", "『w』"}
    # An unclosed mark of one kind does not hide a closed one of another.
    assert spans("“" * 500 + "《三体》").named == {"《三体》"}
