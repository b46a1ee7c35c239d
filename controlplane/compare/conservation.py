"""What a rewrite must conserve, read off a text with rules, no model (Chinese and English):
sentence count, length, negations, numbers and named spans. Each reader is a pure function
of one text, the reference of the compiled reader; the comparator puts two readings side by
side. The choices where the language leaves room: docs/evidence.md, "Comparators".
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import lru_cache

from controlplane.compare import native
from controlplane.compare.redaction import (
    EMAIL,
    PHONE,
    find_spans,
    phone_key,
    token_around,
    trim_token,
)

# --- sentences ------------------------------------------------------------------------

_CLOSERS = "\"'”’」』》）)]】"
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st vs etc inc ltd co corp fig eg ie approx dept est "
    "jan feb mar apr jun jul aug sep sept oct nov dec mon tue tues wed thu thur thurs fri sat sun".split()
)
# Python's regex engine skips fast to a pattern's first character when that is a plain
# character set, so every pattern here starts with one (no leading lookbehind or \b), and
# boundaries are checked on the few matches instead. An ellipsis (... …) is a pause: the
# dots of "..." are never a sentence end.
_SENTENCE_END = re.compile(
    rf"[。！？!?]+[{re.escape(_CLOSERS)}]*|\.(?![.])(?=\s|$|[{re.escape(_CLOSERS)}])[{re.escape(_CLOSERS)}]*"
)


def sentences(text: str) -> list[str]:
    """The sentences of a text, in order (empty ones dropped)."""
    body = text.strip()
    out: list[str] = []
    start = 0
    for end in _sentence_ends(body):
        piece = body[start:end].strip()
        if piece:
            out.append(piece)
        start = end
    tail = body[start:].strip()
    if tail:
        out.append(tail)
    return out


def sentence_count(text: str) -> int:
    """len(sentences(text)), without building the sentences."""
    body = text.strip()
    ends = _sentence_ends(body)  # every piece up to an end holds at least its end mark
    tail = body[ends[-1] :] if ends else body
    return len(ends) + (1 if tail.strip() else 0)


def _sentence_ends(body: str) -> list[int]:
    ends = []
    # The marks lstrip takes off the body's start, counted once (see _is_abbreviation).
    lead = len(body) - len(body.lstrip(_WORD_OPENERS))
    for match in _SENTENCE_END.finditer(body):
        if match.group()[0] == ".":
            if match.start() > 0 and body[match.start() - 1] == ".":
                continue  # the last dot of an ellipsis
            if _is_abbreviation(body, match.start(), lead):
                continue
        ends.append(match.end())
    return ends


_WORD_OPENERS = "\"'“‘(（"
# The longest abbreviation, without its dots ("approx", "thurs"): a longer word is none.
_LONGEST_ABBREVIATION = max(map(len, _ABBREVIATIONS))


def _is_abbreviation(text: str, dot: int, lead: int) -> bool:
    # The word before the dot, back to the previous space: "Mr", "e.g", "J". With no space
    # in the 12 characters before the dot, the word runs back to the text's start; it is
    # then read back only until it holds more letters than any abbreviation (reading all
    # of it at every such dot is quadratic: "a.\t" * 30_000).
    space = text.rfind(" ", max(0, dot - 12), dot)
    if space == -1 and dot > 12:
        start = min(lead, dot)  # lstrip's cut of text[:dot]
        kept, i = 0, dot
        while i > start and kept <= _LONGEST_ABBREVIATION:
            i -= 1
            kept += text[i] != "."
        if kept > _LONGEST_ABBREVIATION:
            return False  # more than any abbreviation, or one letter, holds
    word = text[space + 1 : dot]
    if not word or not word[-1].isalpha():
        return False
    word = word.lstrip(_WORD_OPENERS).replace(".", "").lower()
    # "e.g." and single letters ("J. Smith") are abbreviations too.
    return word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha())


# --- negations ------------------------------------------------------------------------

# Words that contain a negation character without negating anything.
_NOT_NEGATING_ZH = (
    "非常 无论 别人 别的 别处 特别 区别 分别 告别 类别 级别 性别 识别 未来 否则 是否 能否 "
    "可否 与否 不过 不少 不错 不久 不断 不管 不仅 莫名 无数 无限 无比 无线 除非 "
    "差不多 了不起 对不起 不得不"
).split()
_NOT_NEGATING_ZH_RE = re.compile(
    "|".join(sorted(map(re.escape, _NOT_NEGATING_ZH), key=len, reverse=True))
)
_NEGATION_ZH = re.compile("没有|[不没无未非别莫勿否]")
_NEGATION_EN = re.compile(
    r"[Nn](?:o(?:t|ne|thing|body|where|r)?|ever|either)\b|[Ww]ithout\b|[Cc]annot\b|n[’']t\b"
    r"|[Uu]nable\b|N(?:O(?:T|NE|THING|BODY|WHERE|R)?|EVER|EITHER)\b|WITHOUT\b|CANNOT\b|UNABLE\b"
)
_NEGATION_CANON = {"没有": "没", "cannot": "not", "n't": "not", "n’t": "not", "unable": "not"}


def negations(text: str) -> Counter[str]:
    """Negation words as a multiset, spelled one way (没有 → 没; can't, cannot → not)."""
    counts: Counter[str] = Counter()
    if not text.isascii():
        zh = _NOT_NEGATING_ZH_RE.sub(" ", text)
        for match in _NEGATION_ZH.finditer(zh):
            word = match.group()
            counts[_NEGATION_CANON.get(word, word)] += 1
    for match in _NEGATION_EN.finditer(text):
        word = match.group().lower()
        if not word.startswith("n'") and not word.startswith("n’"):
            if match.start() and text[match.start() - 1].isalpha():
                continue  # inside a word: "piano", "announce"
        counts[_NEGATION_CANON.get(word, word)] += 1
    return counts


def negation_counts(words: Counter[str]) -> Counter[str]:
    """How many negations each language holds ("zh", "en")."""
    counts: Counter[str] = Counter()
    for word, n in words.items():
        counts["en" if word.isascii() else "zh"] += n
    return counts


# --- named spans ----------------------------------------------------------------------

# Emails are found from each "@" outwards and URLs once per run of URL characters
# (redaction.find_spans), in linear time.
_PHONE = re.compile(rf"(?P<phone>{PHONE})")
_DIGITS = re.compile(r"[0-9]+")
# The digit runs inside a token (next to a letter, _ or -): a run standing alone is a
# number, and skipping it in the regex saves a Python step per run.
_TOKEN_DIGITS = re.compile(
    r"[0-9](?<![0-9][0-9])(?:(?<=[A-Za-z_-][0-9])[0-9]*|[0-9]*(?=[A-Za-z_-]))(?![0-9])"
)


# A number with a unit or an ordinal ending is a number, not an ID: 3pm, 5th, 10kg, 2x.
_NUMBER_WITH_UNIT = re.compile(
    r"\d+(?:\.\d+)?(?:st|nd|rd|th|am|pm|AM|PM|[smhdwkKMxX%]|min|ms|kg|km|cm|mm|ml|GB|MB|KB|TB|gb|mb)\Z"
)


def _id_like(text: str, named: set[str]) -> str:
    """Add the ID-like tokens (letters with digits: INV-2024-001, AB12) and blank them out.

    Found from their digits outwards: a regex trying every letter of every word as a
    possible start costs ten times more."""
    pieces: list[str] = []
    copied = 0  # text before this is in `pieces`
    pos = 0  # the digit runs before this belong to a token already read
    while match := _TOKEN_DIGITS.search(text, pos):
        left, right = token_around(text, *match.span())
        pos = right
        start, end = trim_token(text, left, right)
        token = text[start:end]
        if not all(c.isdigit() or c in "_-" for c in token) and not _NUMBER_WITH_UNIT.match(token):
            named.add(token)
            pieces += [text[copied:start], " "]
            copied = end
    if not pieces:
        return text
    pieces.append(text[copied:])
    return "".join(pieces)


# A quoted span holds 1 to 200 characters up to the first closing mark: what
# “[^”]{1,200}”|「[^」]{1,200}」|『[^』]{1,200}』|《[^》]{1,200}》|"[^"]{1,200}"|'[^']{1,200}'
# finds, read in linear time by _quoted (that regex reads up to 200 characters ahead of
# every opening mark, so a run of unclosed “ costs 200 steps a character).
_QUOTE_CLOSERS = {"“": "”", "「": "」", "『": "』", "《": "》", '"': '"', "'": "'"}
_QUOTE_OPENERS = tuple(_QUOTE_CLOSERS)
_QUOTE_OPENER = re.compile("[“「『《\"']")
_QUOTE_MAX = 200
# A capitalised word ("Acme", "U.S", "O'Neil"), and runs of them ("Bank of America"); a
# run never crosses a full stop, so "Monday. It" is two pieces.
_CAPITALISED_WORD = r"[A-Z][A-Za-z0-9&'’-]*(?:\.[A-Z][A-Za-z0-9]*)*"
# Possessive (`*+`): nothing follows the repetition, so it never gives a word back, and
# the engine need not keep a way back into each of a long run's words.
_CAPITALISED_RUN = re.compile(
    rf"{_CAPITALISED_WORD}(?:[ \t]+(?:(?:of|the|and|de|von|van|&)[ \t]+)?{_CAPITALISED_WORD})*+"
)


def _phone(text: str) -> str:
    return "tel:" + phone_key(re.sub(r"\D", "", text))


# Months and weekdays are names however they are shortened: Dec = December.
_ABBREVIATED_NAMES = {
    short: full
    for full in (
        "January February March April May June July August September October November December "
        "Monday Tuesday Wednesday Thursday Friday Saturday Sunday"
    ).split()
    for short in {full[:3], full[:4] if full.startswith(("Sept", "Tues", "Thur")) else full[:3]}
}
_ABBREVIATED_NAMES["Thurs"] = "Thursday"
# Words that open sentences and run into a following name: "Dear John", "Thanks Anna".
_OPENING_WORDS = frozenset(
    "A An The This That These Those Hi Hello Hey Dear Thanks Thank Please Sorry Yes No Ok Okay "
    "We You Your Our My It If When As For In On At To From By With And But So Also Unfortunately "
    "Good Welcome Congratulations Regards Best".split()
)
_OPENING_MARKS = frozenset(".!?。！？:：;；\n")
_OPENING_SKIP = frozenset(" \t\"'“‘(（「『《")


@dataclass(frozen=True, slots=True)
class Spans:
    named: frozenset[str]
    # The text with emails, URLs, phones and ID-like tokens blanked out, for the number reader.
    rest: str


def spans(text: str) -> Spans:
    """Named spans as a set (quoted spans keep their quotes: 《三体》 ≠ "三体")."""
    named: set[str] = set()
    email, url = "@" in text, "://" in text or "www." in text
    digits = _DIGITS.search(text) is not None
    rest = text
    if email or url or digits:
        pieces: list[str] = []
        copied = 0
        for kind, start, end in find_spans(text, _PHONE if digits else None, email, url):
            value = text[start:end]
            named.add(
                value.lower() if kind == EMAIL else _phone(value) if kind == "phone" else value
            )
            pieces += [text[copied:start], " "]
            copied = end
        if pieces:
            pieces.append(text[copied:])
            rest = "".join(pieces)
        if digits:
            rest = _id_like(rest, named)
    if any(q in text for q in _QUOTE_OPENERS):
        for start, end in _quoted(text):
            quoted = text[start:end]
            if quoted[0] == "'" and not _apostrophes_are_quotes(text, start, end):
                continue
            named.add(" ".join(quoted.split()))
    for match in _CAPITALISED_RUN.finditer(rest):
        start = match.start()
        if start and rest[start - 1].isalnum():
            continue  # inside a word ("iPhone")
        run = " ".join(match.group().rstrip(".-&").split())
        if not run or run == "I":
            continue
        if _opens_sentence(rest, start):
            first, _, remainder = run.partition(" ")
            if first in _OPENING_WORDS:
                run = remainder  # "Hi John" → "John": the greeting is capitalised by grammar
            elif not remainder and not run.isupper():
                continue  # a single capitalised word opening a sentence: grammar, not a name
            if not run:
                continue
        named.add(" ".join(_ABBREVIATED_NAMES.get(w.rstrip("."), w) for w in run.split()))
    return Spans(frozenset(named), rest)


def _quoted(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each quoted span, left to right, as the regex above would find them.

    The first closing mark after each opening one is found once per kind and kept while
    it still lies ahead, so every character is looked at O(1) times."""
    closing: dict[str, int] = {}  # per kind, the first closing mark found past some opener
    pos = 0
    while opener := _QUOTE_OPENER.search(text, pos):
        start = opener.start()
        mark = opener.group()
        close = closing.get(mark, -1)
        if close <= start:
            close = text.find(_QUOTE_CLOSERS[mark], start + 1)
            closing[mark] = close = len(text) if close == -1 else close
        if start + 1 < close <= start + 1 + _QUOTE_MAX and close < len(text):
            yield start, close + 1
            pos = close + 1
        else:
            pos = start + 1


def _apostrophes_are_quotes(text: str, start: int, end: int) -> bool:
    """'…' is a quote only when its marks are not apostrophes inside words (don't, users')."""
    before = text[start - 1] if start else " "
    after = text[end] if end < len(text) else " "
    return not before.isalpha() and not after.isalpha()


def _opens_sentence(text: str, start: int) -> bool:
    i = start - 1
    while i >= 0 and text[i] in _OPENING_SKIP:
        i -= 1
    return i < 0 or text[i] in _OPENING_MARKS


# --- numbers --------------------------------------------------------------------------

# Longer digit strings are no number anyone writes: Python reads no longer integer
# (ValueError), and a much longer Decimal overflows.
MAX_DIGITS = 4300
_FULLWIDTH = str.maketrans("０１２３４５６７８９．，％", "0123456789.,%")
_ZH_DIGITS = {
    "〇": 0,
    "零": 0,
    "一": 1,
    "二": 2,
    "两": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
}
_ZH_UNITS = {"十": 10, "百": 100, "千": 1000}
_ZH_BIG = {"万": 10_000, "亿": 100_000_000}
_ZH_BIG_ZEROS = {None: "", "万": "0000", "亿": "00000000"}
_ZH_DIGIT_CHARS = "〇零一二两三四五六七八九"
_ZH_NUMERAL = _ZH_DIGIT_CHARS + "十百千万亿"
_MEASURE_WORDS = (
    "个只件条张本台辆位名人次回遍天日月年岁号周元块角分秒点斤克米里吨份倍层楼页章节家所间项种批组对双套"
    "瓶杯碗盒箱袋包颗粒片支枝根把架座部期届"
)
# Words that hold numeral characters without being numbers (万一 "just in case", 十分
# "very", 千万 "by all means" — unless a numeral comes before: 三十分, 一千万).
_NOT_NUMBERS_ZH = re.compile(
    "一起|一样|一些|一直|一定|一般|一切|一旦|一律|一致|一向|一下|一点儿|一点点|一会儿|一边|一面|"
    "一同|一共|统一|唯一|之一|一一|不一|第一时间|三心二意|一路|一生|一心|一再|一贯|"
    rf"万(?<![{_ZH_NUMERAL}点]万)[一分]|十(?<![{_ZH_NUMERAL}点]十)分|千(?<![{_ZH_NUMERAL}点]千)万"
)
_ARABIC = r"(?P<arabic>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)(?P<big>[万亿])?"
_ZH = rf"[{_ZH_NUMERAL}]+(?:点[{_ZH_DIGIT_CHARS}]+)?"
_PERCENT = r"(?P<{}>\s?%|\s?(?i:percent|per cent)\b)?"
# Every branch starts with a plain character set (see _SENTENCE_END); Latin-only text
# gets the pattern without the Chinese branches.
_NUMBER = re.compile(
    rf"{_ARABIC}{_PERCENT.format('pct')}|百分之(?:(?P<zh_pct>{_ZH})|(?P<ar_pct>\d+(?:\.\d+)?))"
    rf"|(?P<zh>{_ZH}){_PERCENT.format('pct2')}"
)
_NUMBER_ASCII = re.compile(rf"{_ARABIC}{_PERCENT.format('pct')}")
_FULLWIDTH_CHARS = re.compile("[０-９．，％]")
_RANGE_MARKS = frozenset("到至或~～-－、")
_NUMERAL_OR_DIGIT = frozenset(_ZH_NUMERAL + "0123456789")


def numbers(text: str) -> Counter[str]:
    """Numbers as a multiset, each in one spelling: 300, 2500, 1.5, 5%."""
    counts: Counter[str] = Counter()
    if text.isascii():
        body, pattern = text, _NUMBER_ASCII
    else:
        if _FULLWIDTH_CHARS.search(text):
            text = text.translate(_FULLWIDTH)
        body, pattern = _NOT_NUMBERS_ZH.sub(" ", text), _NUMBER
    for match in pattern.finditer(body):
        value: Decimal | None
        groups = match.groupdict()
        percent = bool(groups.get("pct") or groups.get("pct2"))
        arabic = groups["arabic"]
        if arabic is not None:
            if len(arabic) <= 28 and arabic.isascii() and arabic.isdigit():
                # A plain integer (the most common number, and the one a text can repeat
                # every other character) is spelt without Decimal: what _spell would give.
                digits = arabic.lstrip("0")
                spelt = digits + _ZH_BIG_ZEROS[groups["big"]] if digits else "0"
                counts[spelt + ("%" if percent else "")] += 1
                continue
            value = _decimal(arabic.replace(",", ""))
            if value is not None and groups["big"]:
                value *= _ZH_BIG[groups["big"]]
        elif groups.get("ar_pct") is not None:
            value, percent = _decimal(groups["ar_pct"]), True
        else:
            zh = groups["zh_pct"] or groups["zh"]
            percent = percent or groups["zh_pct"] is not None
            if len(zh) == 1 and zh in _ZH_DIGITS and not percent:
                # A lone 一 … 九 is a number before a measure word (三个) or after 第 (第三);
                # 一点 is "a little", not one o'clock.
                follows = body[match.end() : match.end() + 1]
                before = body[match.start() - 1 : match.start()]
                measured = bool(follows) and follows in _MEASURE_WORDS and zh + follows != "一点"
                # 三到五天, 3至5天: a numeral in a range is a number too.
                ranged = (
                    follows in _RANGE_MARKS
                    and body[match.end() + 1 : match.end() + 2] in _NUMERAL_OR_DIGIT
                ) or (
                    before in _RANGE_MARKS
                    and body[match.start() - 2 : match.start() - 1] in _NUMERAL_OR_DIGIT
                )
                if not (measured or ranged or before == "第"):
                    continue
            spelt_zh = _spelt_chinese(zh)
            if spelt_zh is not None:
                counts[spelt_zh + ("%" if percent else "")] += 1
            continue
        if value is None:
            continue
        counts[_spell(value) + ("%" if percent else "")] += 1
    return counts


# --- length ---------------------------------------------------------------------------

# 〇 (U+3007) sits outside the ideograph blocks but is a numeral: 二〇二六 is one number.
_CJK = r"\u3007\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_CJK_RUN = re.compile(rf"[{_CJK}]+")
_ZH_NUMBER_RUN = re.compile(rf"百分之{_ZH}|{_ZH}")
_LATIN_UNIT = re.compile(
    r"[A-Za-z\u00c0-\u024f]+(?:['’][A-Za-z]+)*|[0-9０-９][0-9０-９,.，．]*[%％]?"
)


def length(text: str) -> int:
    """CJK characters plus Latin words plus numbers: a length comparable across languages.

    A number is one unit however it is spelt (百分之五 = 5% = 两千五百 = 2500 = one)."""
    units = len(_LATIN_UNIT.findall(text))
    if not text.isascii():
        units += sum(map(len, _CJK_RUN.findall(text)))
        units -= sum(len(run) - 1 for run in _ZH_NUMBER_RUN.findall(text))
    return units


@lru_cache(maxsize=1024)
def _spelt_chinese(text: str) -> str | None:
    # Cached: a text's numerals repeat (and a hostile one repeats one numeral throughout).
    value = chinese_number(text)
    return None if value is None else _spell(value)


def chinese_number(text: str) -> Decimal | None:
    """三百 → 300, 两千五 → 2500, 一万二 → 12000, 一千零五 → 1005, 一点五 → 1.5, 二〇二六 → 2026."""
    whole, _, fraction = text.partition("点")
    value = _chinese_integer(whole)
    if value is None:
        return None
    if not fraction:
        return Decimal(value)
    digits = [_ZH_DIGITS.get(c) for c in fraction]
    if any(d is None for d in digits):
        return None
    return Decimal(value) + Decimal("0." + "".join(str(d) for d in digits))


def _chinese_integer(text: str) -> int | None:
    if not text:
        return 0
    if all(c in _ZH_DIGITS for c in text):  # 二〇二六: digit by digit
        if len(text) > MAX_DIGITS:
            return None
        return int("".join(str(_ZH_DIGITS[c]) for c in text))
    total = 0
    for big_char in ("亿", "万"):
        if big_char not in text:
            continue
        head, _, text = text.partition(big_char)
        head_value = _section(head) if head else 1
        if head_value is None:
            return None
        big = _ZH_BIG[big_char]
        total += head_value * big
        if len(text) == 1 and _ZH_DIGITS.get(text):  # 一万二 = 12000
            return total + _ZH_DIGITS[text] * big // 10
    rest = _section(text) if text else 0
    return None if rest is None else total + rest


def _section(text: str) -> int | None:
    """A number below 10,000 in Chinese numerals."""
    total, digit, last_unit, zero = 0, None, 10_000, False
    for char in text:
        if char in "零〇":
            zero, digit = True, None
        elif char in _ZH_DIGITS:
            if digit is not None:
                return None  # two digits in a row: not a numeral we can read
            digit = _ZH_DIGITS[char]
        elif char in _ZH_UNITS:
            unit = _ZH_UNITS[char]
            if unit >= last_unit:
                return None
            total += (1 if digit is None else digit) * unit
            digit, last_unit = None, unit
        else:
            return None
    if digit is not None:
        # 两千五 = 2500, 三百五 = 350: a digit right after 百 or 千 counts one place lower.
        total += digit * (last_unit // 10 if 100 <= last_unit < 10_000 and not zero else 1)
    return total


def _decimal(text: str) -> Decimal | None:
    if len(text) > MAX_DIGITS:
        return None
    try:
        return Decimal(text)
    except InvalidOperation:
        return None


def _spell(value: Decimal) -> str:
    text = format(value.normalize(), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


# --- one reading of a text ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reading:
    sentences: int
    length: int
    negations: Counter[str]
    numbers: Counter[str]
    spans: frozenset[str]


def read(text: str) -> Reading:
    """What text_conservation compares, read by the compiled reader when it runs (see
    native.py) and by read_python, its reference, otherwise: the two give the same Reading."""
    _native = native.READER
    last = _last_read[0]
    if last is not None and last[0] is text and last[1] is _native:
        return last[2]
    original = text
    if _native is not None:
        if type(text) is not str:
            text = str.__str__(text)  # a str subclass (a StrEnum, numpy.str_): its characters
        reading = Reading(*_native.read(text))
    else:
        reading = read_python(text)
    _last_read[0] = (original, _native, reading)
    return reading


# The last text read (the very object) and its reading: ingest reads a cloud answer for the
# comparison, then again for its fingerprint (controlplane.compare.fingerprint), once.
_last_read: list[tuple[str, object, Reading] | None] = [None]


def read_python(text: str) -> Reading:
    """The reference reader: the functions above, in Python."""
    found = spans(text)
    return Reading(
        sentences=sentence_count(text),
        length=length(text),
        negations=negations(text),
        numbers=numbers(found.rest),
        spans=found.named,
    )
