"""Masking: typed, numbered placeholders, the same value alike, idempotent, and nothing left over."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.compare.redaction import Masker, fit_masked, mask_text, redact_payload

# Runs once with each reader (the text_reader parameter, tests/conftest.py).
pytestmark = pytest.mark.text_reader

CASES = [
    ("邮箱 Zhang.San@Example.com", "邮箱 <EMAIL_1>"),
    (
        "call 13800138000 or 138 0013 8000 or +86 138-0013-8000",
        "call <PHONE_1> or <PHONE_1> or <PHONE_1>",
    ),
    ("座机 010-62345678，(0755) 2345678", "座机 <PHONE_1>，<PHONE_2>"),
    ("UK office +44 20 7946 0958", "UK office <PHONE_1>"),
    ("US line (555) 123-4567, support 400-800-1234", "US line <PHONE_1>, support <PHONE_2>"),
    ("身份证 11010519491231002X", "身份证 <IDCARD_1>"),
    ("card 4111 1111 1111 1111 = 4111111111111111", "card <CARD_1> = <CARD_1>"),
    ("not a card: 1234567890123", "not a card: <NUM_1>"),
    ("IP 192.168.1.10 and fe80:0:0:0:202:b3ff:fe1e:8329", "IP <IP_1> and <IP_2>"),
    ("order INV-2024-001 and AB12CD34", "order <ID_1> and <ID_2>"),
    ("单号 1234567 与 １２３４５６７", "单号 <NUM_1> 与 <NUM_1>"),
    ("ref 12-3456789 and SO-13800138000", "ref 12-<NUM_1> and <ID_1>"),
    # Phones and cards with "." or "/" between groups, or none after a bracket; SSN-like.
    ("call (415)555-0123 or 415.555.0123", "call <PHONE_1> or <PHONE_1>"),
    ("手机 138.0013.8000 或 138/0013/8000", "手机 <PHONE_1> 或 <PHONE_1>"),
    ("UK +44.20.7946.0958, card 4111.1111.1111.1111", "UK <PHONE_1>, card <CARD_1>"),
    ("SSN 123-45-6789", "SSN <NUM_1>"),
    # Non-breaking, narrow and zero-width spaces between digit groups.
    ("138\u00a00013\u00a08000 138\u202f0013\u202f8000", "<PHONE_1> <PHONE_1>"),
    ("138\u200b0013\u200b8000 138\u20600013\u20608000", "<PHONE_1> <PHONE_1>"),
    # Any decimal digits: Arabic-Indic, Devanagari, mathematical; one value however spelt.
    (
        "١٣٨٠٠١٣٨٠٠٠ = १३८००१३८००० = 𝟏𝟑𝟖𝟎𝟎𝟏𝟑𝟖𝟎𝟎𝟎 = 13800138000",
        "<PHONE_1> = <PHONE_1> = <PHONE_1> = <PHONE_1>",
    ),
    ("单号 ١٢٣٤٥٦٧ 与 AB١٢", "单号 <NUM_1> 与 <ID_1>"),
    # Emails: full-width @, accented local parts and domains, a zero-width space inside.
    ("ann＠example.com, ann@example.com", "<EMAIL_1>, <EMAIL_1>"),
    ("josé.müller@example.com and ann@exämple.com", "<EMAIL_1> and <EMAIL_2>"),
    ("dan\u200b@example.com = dan@example.com", "<EMAIL_1> = <EMAIL_1>"),
    # Left alone: short numbers, dates, times, prices, model names.
    (
        "v1.2.3 on 2024.01.15, 3/4/2024, 1.5 or 12/25",
        "v1.2.3 on 2024.01.15, 3/4/2024, 1.5 or 12/25",
    ),
    (
        "on 2026-11-30 at 10:30 it cost 35.50 on gpt-4o",
        "on 2026-11-30 at 10:30 it cost 35.50 on gpt-4o",
    ),
]


def test_masking_cases() -> None:
    for text, masked in CASES:
        assert mask_text(text) == masked, text
        assert mask_text(masked) == masked, text


def test_a_placeholder_spelt_with_other_digits_is_no_placeholder() -> None:
    masked = mask_text("<NUM_١٣٨٠٠١> <NUM_1>")
    assert "١" not in masked and masked.endswith(" <NUM_1>")
    assert mask_text(masked) == masked


def test_the_same_value_gets_the_same_placeholder_across_fields() -> None:
    payload = {
        "policy": "redacted",
        "keep_probability": 1.0,
        "input": {"text": "Customer ann@example.com, phone 13800138000", "segments": [1]},
        "edge_output": "Reply sent to ANN@example.com",
        "cloud_output": "Reply sent to ann@example.com and bob@example.com",
        "diff": {"spans": {"missing": ["bob@example.com"], "extra": []}},
        "edge_error_message": None,
        "cloud_error_message": "timeout calling 13800138000",
    }
    masked = redact_payload(payload)
    assert masked["input"] == {"text": "Customer <EMAIL_1>, phone <PHONE_1>", "segments": [1]}
    assert masked["edge_output"] == "Reply sent to <EMAIL_1>"
    assert masked["cloud_output"] == "Reply sent to <EMAIL_1> and <EMAIL_2>"
    assert masked["diff"] == {"spans": {"missing": ["<EMAIL_2>"], "extra": []}}
    assert masked["cloud_error_message"] == "timeout calling <PHONE_1>"
    assert masked["keep_probability"] == 1.0


# --- properties -------------------------------------------------------------------------

words_en = st.sampled_from(
    ["please", "refund", "the", "order", "call", "me", "at", "or", "by", "today", ","]
)
words_zh = st.sampled_from(["请", "联系", "我", "退款", "订单", "电话", "邮箱", "今天", "，", "。"])
emails = st.builds(
    lambda user, host, tld: f"{user}@{host}.{tld}",
    st.from_regex(r"[a-z][a-z0-9._]{0,10}[a-z0-9]", fullmatch=True),
    st.from_regex(r"[a-z][a-z0-9-]{0,8}[a-z0-9]", fullmatch=True),
    st.sampled_from(["com", "cn", "org", "io", "com.cn"]),
)
cn_mobiles = st.builds(
    lambda second, rest, sep, prefix: f"{prefix}1{second}{rest[:1]}{sep}{rest[1:5]}{sep}{rest[5:]}",
    st.sampled_from("3456789"),
    st.from_regex(r"[0-9]{9}", fullmatch=True),
    st.sampled_from(["", " ", "-"]),
    st.sampled_from(["", "+86 ", "+86-", "0086 "]),
)
intl_phones = st.builds(
    lambda cc, rest: f"+{cc} {rest[:3]} {rest[3:6]} {rest[6:]}",
    st.integers(1, 999),
    st.from_regex(r"[0-9]{9,10}", fullmatch=True),
)
digit_runs = st.from_regex(r"[0-9]{6,24}", fullmatch=True)
# Digit runs glued to short codes: "12-3456789", "A-1234567".
glued_runs = st.builds(
    lambda head, run: f"{head}-{run}", st.from_regex(r"[0-9A-Z]{1,3}", fullmatch=True), digit_runs
)
secrets = st.one_of(emails, cn_mobiles, intl_phones, digit_runs, glued_runs)


@st.composite
def texts_with_secrets(draw: st.DrawFn) -> tuple[str, list[str]]:
    # English separates words with spaces; Chinese runs them together.
    chinese = draw(st.booleans())
    words = words_zh if chinese else words_en
    parts: list[str] = []
    planted: list[str] = []
    for _ in range(draw(st.integers(1, 4))):
        # At least one word between two secrets: two emails glued together are one token.
        parts.extend(draw(st.lists(words, min_size=1, max_size=5)))
        secret = draw(secrets)
        planted.append(secret)
        parts.append(secret)
    parts.extend(draw(st.lists(words, max_size=5)))
    return ("" if chinese else " ").join(parts), planted


def _digits(text: str) -> str:
    return re.sub(r"\D", "", text)


@settings(max_examples=400)
@given(texts_with_secrets())
def test_no_email_phone_or_long_digit_run_survives(case: tuple[str, list[str]]) -> None:
    text, planted = case
    masked = mask_text(text)
    assert "@" not in masked
    assert not re.search(r"[0-9０-９]{6,}", masked), masked
    for secret in planted:
        assert secret not in masked
        if len(_digits(secret)) >= 6:
            # Not even with its separators taken out.
            assert _digits(secret) not in _digits(masked.replace(" ", "")), (secret, masked)


@settings(max_examples=300)
@given(st.one_of(texts_with_secrets().map(lambda c: c[0]), st.text(max_size=200)))
def test_masking_is_idempotent(text: str) -> None:
    once = mask_text(text)
    assert mask_text(once) == once
    masker = Masker()
    assert masker.text(masker.text(text)) == masker.text(text)


# --- object keys, bounds --------------------------------------------------------------


def test_object_keys_are_masked_with_the_values_numbering() -> None:
    payload = {
        "input": {"ann@example.com": "call 13800138000", "rows": [{"13800138000": True}]},
        "edge_output": {"ANN@example.com": "ok"},
        "cloud_output": "mail ann@example.com",
        "diff": {"fields": {"bob@example.com": {"edge": 1, "cloud": 2}}},
        "keep_probability": 1.0,
    }
    masked = redact_payload(payload)
    assert masked["input"] == {"<EMAIL_1>": "call <PHONE_1>", "rows": [{"<PHONE_1>": True}]}
    assert masked["edge_output"] == {"<EMAIL_1>": "ok"}
    assert masked["cloud_output"] == "mail <EMAIL_1>"
    assert masked["diff"] == {"fields": {"<EMAIL_2>": {"edge": 1, "cloud": 2}}}


def test_keys_masked_alike_keep_every_value() -> None:
    value = {
        "ann@example.com": 1,
        "ANN@example.com": 2,
        "<EMAIL_1>~2": 3,  # already the suffixed form of the first
        "Ann@Example.com": 4,
        "plain": 5,
    }
    assert Masker().json(value) == {
        "<EMAIL_1>": 1,
        "<EMAIL_1>~2": 2,
        "<EMAIL_1>~2~2": 3,
        "<EMAIL_1>~3": 4,
        "plain": 5,
    }
    # Thousands of spellings of one email: every value kept, in time linear in their number.
    spellings = {
        f"ann{'@'}{'eXaMpLe'[: i % 7]}{'example'[i % 7 :]}.com" + " " * i: i for i in range(3000)
    }
    masked = Masker().json(spellings)
    assert sorted(masked.values()) == list(range(3000))
    assert all("@" not in key for key in masked)


def test_json_deeper_than_the_bound_raises_a_value_error_naming_it() -> None:
    deep: object = "ann@example.com"
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(ValueError, match="JSON nested deeper than 128 levels"):
        Masker().json(deep)
    ok: object = "ann@example.com"
    for _ in range(128):
        ok = {"k": ok}
    masked = Masker().json(ok)
    for _ in range(128):
        masked = masked["k"]
    assert masked == "<EMAIL_1>"


def test_a_text_longer_than_max_chars_is_cut_and_marked() -> None:
    text = "Refund ann@example.com now. " * 10  # 280 characters
    assert mask_text(text, max_chars=1_000) == "Refund <EMAIL_1> now. " * 10
    cut = mask_text(text, max_chars=28)
    assert cut == "Refund <EMAIL_1> now. …<TRUNCATED_252>"
    assert mask_text(cut, max_chars=28) == cut  # masking a cut text again changes nothing
    # The default bound.
    assert mask_text("x" * 32_000) == "x" * 32_000
    assert mask_text("x" * 32_001) == "x" * 32_000 + "…<TRUNCATED_1>"


def test_a_cut_never_keeps_half_a_secret() -> None:
    head = "x" * 45 + " "
    for secret in ("13800138000", "138 0013 8000", "ann.lee@example.com", "INV-2024-00123"):
        text = head + secret + " tail"
        masked = mask_text(text, max_chars=50)
        assert masked == head + f"…<TRUNCATED_{len(text) - len(head)}>", secret


def test_redact_payload_cuts_every_string_to_max_chars() -> None:
    payload = {
        "input": {"text": "a" * 50, "tags": ["b" * 50]},
        "edge_output": "c" * 50,
        "cloud_output": {"d" * 50: "e" * 10},
        "diff": None,
        "edge_error_message": "f" * 50,
        "cloud_error_message": None,
        "keep_probability": 1.0,
    }
    masked = redact_payload(payload, max_chars=20)
    marker = "…<TRUNCATED_30>"
    assert masked["input"] == {"text": "a" * 20 + marker, "tags": ["b" * 20 + marker]}
    assert masked["edge_output"] == "c" * 20 + marker
    assert masked["cloud_output"] == {"d" * 20 + marker: "e" * 10}
    assert masked["edge_error_message"] == "f" * 20 + marker
    assert masked["cloud_error_message"] is None


def test_only_placeholder_shapes_are_kept() -> None:
    assert mask_text("<NUM_1> and <EMAIL_12>") == "<NUM_1> and <EMAIL_12>"
    # A number inside angle brackets is no placeholder: "<SO-13800138000>" kept it raw.
    assert mask_text("order <SO-13800138000>") == "order <<ID_1>>"
    assert mask_text("ref <ID_13800138000>") == "ref <<ID_1>>"
    assert mask_text("x <a13800138000>") == "x <<ID_1>>"


def test_full_width_digits_belong_to_their_token() -> None:
    masked = mask_text("code 3The7９YY9")
    assert masked == "code <ID_1>"
    assert mask_text(masked) == masked


PLACEHOLDERS = re.compile(r"<[A-Z]+_[0-9]+>")


@given(st.integers(0, 60), st.integers(20, 220))
def test_a_masked_text_fits_its_column_without_half_a_placeholder(n: int, limit: int) -> None:
    """Masking lengthens a text (`a1@b.io` becomes `<EMAIL_1>`): cut to a column's width,
    it never keeps part of a placeholder, and the cut is marked with what it dropped."""
    masked = Masker().text(" ".join(f"a{i}@b.io" for i in range(n)))
    fitted = fit_masked(masked, limit)
    assert len(fitted) <= limit or len(masked) <= limit
    if len(masked) <= limit:
        assert fitted == masked
        return
    head, mark = fitted.rsplit("…", 1)
    assert mark == f"<TRUNCATED_{len(masked) - len(head)}>" and masked.startswith(head)
    assert "<" not in PLACEHOLDERS.sub("", head), head[-30:]
