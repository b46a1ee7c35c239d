"""Where in a text the differences a blind diff names are written (pure): numbers,
negations and named spans found by reading the text as text_conservation reads it
(controlplane.compare.conservation), so 七 is found for the 7 a diff names, "can't" for
its "not" and "Dec" for its "December"; a negation's counterpart in the other answer; the
top-level fields of a JSON text.

A place is a (start, end) span of the text given. Each function reads only the texts and
values it is given, so whichever answer came from where, the same text gets the same spans.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from difflib import SequenceMatcher
from functools import lru_cache
from itertools import islice

from controlplane.compare import conservation
from controlplane.compare.redaction import PHONE, TYPES, find_spans, phone_key

Span = tuple[int, int]

# --- numbers --------------------------------------------------------------------------

# The most numbers or negation characters of one text looked at (each is read around), and
# Latin words: a hostile answer may hold thousands, and the page is drawn on every key.
MAX_PLACES = 2000
MAX_WORDS = 20_000
_ZH_DIGITS = "〇零一二两三四五六七八九"
# A number in digits (thousands separated or not, a decimal point, 万/亿) or in Chinese
# numerals, with its percent sign: what the comparator reads as one number, or as none
# (whether it does is read with the comparator's own reader, see _read_here).
_NUMBER_RUN = re.compile(
    rf"(?:百分之)?(?:(?:[0-9０-９]{{1,3}}(?:[,，][0-9０-９]{{3}})+|[0-9０-９]+)(?:[.．][0-9０-９]+)?[万亿]?"
    rf"|[{_ZH_DIGITS}十百千万亿]+(?:点[{_ZH_DIGITS}]+)?)"
    r"(?:\s?[%％]|\s?(?i:percent|per cent)\b)?"
)
# What the readers look at around a numeral or a negation character (a measure word, 第, a
# range; words that hold one and mean something else, 十分 "very", 第一时间 "at once",
# 对不起 "sorry"): never more than four characters away.
_CONTEXT = 4
# A lone numeral is a number only where it stands (三天, 第三): its value.
_ZH_DIGIT_VALUES = dict(zip("〇零一二两三四五六七八九", "001223456789", strict=True))
# ASCII tokens (letters, digits, _ and -): one with letters and digits is an ID, not numbers.
_TOKEN = re.compile(r"[A-Za-z0-9_-]+")
_DIGIT = re.compile(r"\d")
_PHONE = re.compile(rf"(?P<phone>{PHONE})")


def numbers(text: str, values: Collection[str]) -> list[Span]:
    """Where the numbers spelt as in `values` ("90", "7", "5%") are written (among the
    first MAX_PLACES numbers of the text)."""
    if not values:
        return []
    values = set(values)
    wanted: list[tuple[int, int, Counter[str]]] = []
    for run in islice(_NUMBER_RUN.finditer(text), MAX_PLACES):
        written = run.group()
        own = _read(conservation.numbers, written)
        if not own and written in _ZH_DIGIT_VALUES:
            own = Counter([_ZH_DIGIT_VALUES[written]])
        if own.keys() & values:
            wanted.append((run.start(), run.end(), own))
    named = _not_numbers(text, [(start, end) for start, end, _ in wanted])
    out = []
    for start, end, own in wanted:
        if any(named[start:end]):
            continue
        # Digits are numbers wherever they stand (an ID around them is named); numerals
        # are when the reader counts them there (三天 is 3, 十分 "very" is no 10).
        if text[start:end].isascii() or _read_here(conservation.numbers, text, start, end) & own:
            out.append((start, end))
    return out


def _not_numbers(text: str, places: Sequence[Span]) -> bytearray:
    """Per character, whether the comparator reads no number there whatever digits stand
    there: in an email, a URL, a phone number or an ID-like token (INV-2024-001, A4), which
    are named spans. Only the tokens at `places` (in text order) are read as spans, none
    after the last: a text of thousands of IDs costs a reading per number asked about."""
    named = bytearray(len(text))
    if not places or not _DIGIT.search(text):
        return named
    urls = "://" in text or "www." in text
    found = [(s, e) for _, s, e in find_spans(text, _PHONE, "@" in text, urls)]
    at = 0
    for token in _TOKEN.finditer(text):
        start, end = token.span()
        while at < len(places) and places[at][1] <= start:
            at += 1
        if at == len(places):
            break
        if places[at][0] < end and _id_like(token.group().strip("_-")):
            found.append((start, end))
    for start, end in found:
        named[start:end] = b"\x01" * (end - start)
    return named


@lru_cache(maxsize=4096)
def _id_like(word: str) -> bool:
    """Whether the comparator names this token with digits (an ID: INV-7, A4) rather than
    reading it as a number (3pm, 10kg, 5th); a text repeats its IDs."""
    if not word or word.isdigit() or not any(c.isdigit() for c in word):
        return False
    return word in conservation.spans(word).named


def _read_here(
    reader: Callable[[str], Counter[str]], text: str, start: int, end: int
) -> Counter[str]:
    """What the reader reads in text[start:end] where it stands: its reading of the few
    characters around it, less the reading with a space in its place (a numeral in a range,
    三到五天, makes its neighbour a number: what it takes from the neighbour is read too,
    so a caller keeps only what text[start:end] itself can be)."""
    before, after = text[max(0, start - _CONTEXT) : start], text[end : end + _CONTEXT]
    return _read(reader, before + text[start:end] + after) - _read(reader, before + " " + after)


@lru_cache(maxsize=4096)
def _read(reader: Callable[[str], Counter[str]], text: str) -> Counter[str]:
    """The reader's reading of a short text (a text repeats its numbers and negations)."""
    return reader(text)


# --- negations ------------------------------------------------------------------------

_WORD = re.compile(r"[A-Za-z]+(?:['’][A-Za-z]+)*")
_NEGATION_ZH = re.compile("没有|[不没无未非别莫勿否]")


def negations(text: str, forms: Collection[str]) -> list[Span]:
    """Where the negations the comparator spells as in `forms` ("not", "没", "不") are
    written: the whole word (can't, cannot, never) or the character (不, 没有); among the
    text's first MAX_WORDS Latin words and MAX_PLACES negation characters."""
    if not forms:
        return []
    forms = set(forms)
    out = []
    if any(f.isascii() for f in forms):
        for word in islice(_WORD.finditer(text), MAX_WORDS):
            if any(f in forms for f in _read(conservation.negations, word.group())):
                out.append(word.span())
    if not text.isascii() and not all(f.isascii() for f in forms):
        for match in islice(_NEGATION_ZH.finditer(text), MAX_PLACES):
            own = _read(conservation.negations, match.group())
            if own.keys() & forms and _read_here(conservation.negations, text, *match.span()) & own:
                out.append(match.span())
    return out


# A word (Latin letters and digits, with an apostrophe inside: can't) or one character
# (a Chinese character, a mark): what two answers are aligned on.
_ALIGNED = re.compile(r"[A-Za-z0-9\u00c0-\u024f]+(?:['’][A-Za-z]+)*|\S")
# Longer answers are not aligned: difflib's cost grows faster than the product of the
# lengths (half a second at worst for two answers of 1500 words written to be costly).
MAX_ALIGNED_TOKENS = 1500
# A negation replaced by a stretch longer than this in the other answer has no counterpart.
_MAX_COUNTERPART = 3


def counterparts(text: str, other: str, places: Iterable[Span]) -> list[Span]:
    """Where `text` says what the negations at `places` of `other` negate: the word that
    replaced the negation (can for can't), else the word the negation stood next to — the
    one before "not" (is for "is not"), the one after any other (能 for 不能, said for
    "never said")."""
    places = list(places)
    if not places:
        return []
    mine_found, theirs_found = list(_ALIGNED.finditer(text)), list(_ALIGNED.finditer(other))
    if not mine_found or not theirs_found:
        return []
    if max(len(mine_found), len(theirs_found)) > MAX_ALIGNED_TOKENS:
        return []
    mine = [m.group().lower() for m in mine_found]
    theirs = [m.group().lower() for m in theirs_found]
    mine_at = [m.span() for m in mine_found]
    theirs_starts = [m.start() for m in theirs_found]
    blocks = SequenceMatcher(None, mine, theirs).get_opcodes()
    block_starts = [b[3] for b in blocks]
    out = []
    for start, _ in places:
        # The token the negation starts in (places start at a token's start).
        first = bisect_right(theirs_starts, start) - 1
        if first < 0:
            continue
        tag, i1, i2, j1, j2 = blocks[bisect_right(block_starts, first) - 1]
        if tag == "replace" and i2 - i1 <= _MAX_COUNTERPART:
            out.append((mine_at[i1][0], mine_at[i2 - 1][1]))
        elif tag == "insert":
            word = _word_beside(mine, i1, before=theirs[first] == "not")
            if word is not None:
                out.append(mine_at[word])
    return out


def _word_beside(tokens: list[str], gap: int, *, before: bool) -> int | None:
    """The index of the word just before (or just after) the gap, a mark or two between
    them skipped."""
    steps = (
        range(gap - 1, max(-1, gap - 4), -1) if before else range(gap, min(len(tokens), gap + 3))
    )
    return next((k for k in steps if tokens[k][0].isalnum()), None)


# --- named spans ----------------------------------------------------------------------

# Names of months and weekdays the comparator reads in full however they are shortened.
_CALENDAR = (
    "January February March April May June July August September October November December "
    "Monday Tuesday Wednesday Thursday Friday Saturday Sunday"
).split()
_SHORTENED = {
    full: [full[:3]] + ([full[:4]] if full.startswith(("Sept", "Tues", "Thur")) else [])
    for full in _CALENDAR
}
_SHORTENED["Thursday"].append("Thurs")
# Most names of one answer looked for (each is a pass over the text).
MAX_NAMES = 200
_PLACEHOLDER = re.compile(rf"(?:{'|'.join(TYPES)})_[0-9]{{1,6}}")


def names(text: str, values: Iterable[str]) -> list[Span]:
    """Where the named spans in `values` are written, as the comparator spells them: an
    email in any case, a phone number as `tel:` and its digits, runs of words with any
    spaces between them, a month or weekday shortened (Dec for December)."""
    out: list[Span] = []
    phones = set()
    for value in list(values)[:MAX_NAMES]:
        if not value.strip():
            continue
        if value.startswith("tel:"):
            phones.add(value)
            continue
        if _PLACEHOLDER.fullmatch(value):
            # A masked value: the diff names it bare (EMAIL_1), the text holds <EMAIL_1>.
            pattern = re.compile(rf"<{value}>|(?<![\w<]){value}(?!\w)")
        else:
            pattern = _pattern(value, any_case="@" in value)
        out += [m.span() for m in pattern.finditer(text)]
    if phones:
        for _, start, end in find_spans(text, _PHONE, False):
            if "tel:" + phone_key(re.sub(r"\D", "", text[start:end])) in phones:
                out.append((start, end))
    return out


def _pattern(value: str, *, any_case: bool) -> re.Pattern[str]:
    """The value's words with any spaces between them, as a whole: not inside a longer
    Latin word or number (next to a Chinese character is fine: 90元)."""
    words = [_name_word(w) for w in value.split()]
    edge_start = r"(?<![A-Za-z0-9])" if value[0].isascii() and value[0].isalnum() else ""
    edge_end = r"(?![A-Za-z0-9])" if value[-1].isascii() and value[-1].isalnum() else ""
    return re.compile(edge_start + r"\s+".join(words) + edge_end, re.IGNORECASE if any_case else 0)


def _name_word(word: str) -> str:
    if word not in _SHORTENED:
        return re.escape(word)
    shortened = "|".join(re.escape(s) for s in sorted(_SHORTENED[word], key=len, reverse=True))
    return rf"(?:{re.escape(word)}|(?:{shortened})\.?)"


# --- plain values ---------------------------------------------------------------------


def words(text: str, values: Iterable[str]) -> list[Span]:
    """Where each value is written as a whole (any case, any spaces between its words)."""
    found = [v.strip() for v in list(values)[:MAX_NAMES] if v.strip()]
    return [m.span() for v in found for m in _pattern(v, any_case=True).finditer(text)]


# --- JSON fields ----------------------------------------------------------------------

_SPACE = re.compile(r"\s*")
_DECODER = json.JSONDecoder()


def fields(text: str) -> dict[str, Span]:
    """The top-level fields of a JSON object text: each key to the span from its quote to
    the end of its value; what is read before a break in the JSON, if any."""
    out: dict[str, Span] = {}
    at = _skip(text, 0)
    if not text.startswith("{", at):
        return out
    at = _skip(text, at + 1)
    while text.startswith('"', at):
        try:
            key, key_end = _DECODER.raw_decode(text, at)
            colon = _skip(text, key_end)
            if not text.startswith(":", colon):
                return out
            _, value_end = _DECODER.raw_decode(text, _skip(text, colon + 1))
        except (ValueError, RecursionError):
            return out
        out[key] = (at, value_end)
        at = _skip(text, value_end)
        if not text.startswith(",", at):
            return out
        at = _skip(text, at + 1)
    return out


def _skip(text: str, at: int) -> int:
    found = _SPACE.match(text, at)
    return found.end() if found else at
