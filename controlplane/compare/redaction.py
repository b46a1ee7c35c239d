"""Masking personal data in payload text before it is stored (`payload_policy: redacted`):
typed, numbered placeholders, one `Masker` per result so a value keeps its placeholder
across the result's fields; idempotent, truncating past `max_chars`, and linear in the text.
What is masked and how: docs/evidence.md, "Comparators".
"""

from __future__ import annotations

import re
import sys
import unicodedata
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from controlplane.compare import native

TYPES = ("EMAIL", "IP", "IDCARD", "CARD", "PHONE", "ID", "NUM")
# The most characters of one text that are read (compared, masked): settings'
# `compare_max_chars` overrides it per call.
MAX_CHARS = 32_000
TRUNCATED = "TRUNCATED"
# Deeper JSON is refused (ValueError) rather than walked: bodies are at most 64 deep
# (controlplane.http), and a diff nests a compared value a few levels further.
MAX_DEPTH = 128

_DIGIT = "[0-9０-９]"
PHONE = (
    # Each branch starts with a plain character, and "not after a digit" is checked once the
    # first digit is consumed: the regex engine then skips fast over text without digits.
    # Digit groups are joined by a space (a non-breaking one reads as a space: see
    # _view), a zero-width space or joiner, "-", "." or "/".
    r"(?:\+|0(?<!\d0)0)\d{1,3}[ ./\u200b-\u200d\u2060-]?(?:\(\d{1,4}\)[ ./\u200b-\u200d\u2060-]?)?\d{1,4}(?:[ ./\u200b-\u200d\u2060-]?\d{2,4}){1,4}(?!\d)"  # international
    r"|1(?<!\d1)[3-9]\d[ ./\u200b-\u200d\u2060-]?\d{4}[ ./\u200b-\u200d\u2060-]?\d{4}(?!\d)"  # Chinese mobile
    r"|(?:\(0\d{2,3}\)|0(?<!\d0)\d{2,3})[ ./\u200b-\u200d\u2060-]?\d{7,8}(?!\d)"  # Chinese landline
    r"|(?:\(\d{3}\)[ ./\u200b-\u200d\u2060-]?|\d(?<!\d\d)\d{2}[ ./\u200b-\u200d\u2060-])\d{3}[ ./\u200b-\u200d\u2060-]\d{4}(?!\d)"  # North American, 400 lines
)
# A placeholder: a number of at most 6 digits (one type of one result never needs more),
# so "<ID_13800138000>" or "<SO-13800138000>" is no placeholder and its digits are masked.
_PLACEHOLDER = rf"<(?:{'|'.join(TYPES)})_[0-9]{{1,6}}>|<{TRUNCATED}_[0-9]{{1,9}}>"
_IS_PLACEHOLDER = re.compile(_PLACEHOLDER)
_KEEP = rf"(?P<KEEP>{_PLACEHOLDER})"
_IPV4 = r"(?P<IP>\d(?<![\d.]\d)\d{0,2}(?:\.\d{1,3}){3}(?![\d.]))"
_IPV6 = (
    r"(?P<IP6>[0-9A-Fa-f](?<![:\w][0-9A-Fa-f])[0-9A-Fa-f]{0,3}(?::[0-9A-Fa-f]{1,4}){3,7}(?![:\w]))"
)
# Chinese resident ID: 17 digits and a check digit or X. Cards: 13 to 19 digits, plain or
# in groups of four. Like PHONE, each starts with a plain character (fast skipping) and
# checks what comes before once its first digit is consumed.
_IDCARD = r"(?P<IDCARD>\d(?<![0-9A-Za-z]\d)\d{16}[\dXx](?![0-9A-Za-z]))"
_CARD = r"(?P<CARD>\d(?<!\d\d)\d{3}[ ./\u200b-\u200d\u2060-](?:\d{4}[ ./\u200b-\u200d\u2060-]){2}\d{1,7}(?!\d)|\d(?<!\d\d)\d{12,18}(?!\d))"
# US social security numbers (123-45-6789), masked as numbers.
_SSN = r"(?P<SSN>\d(?<![\d-]\d)\d{2}-\d{2}-\d{4}(?![\d-]))"
_PHONE = rf"(?P<PHONE>{PHONE})"
# Zero-width characters: dropped from the values they hide in (keys).
_ZERO_WIDTH = re.compile("[\u200b-\u200d\u2060]")
_DIGIT_RUN = re.compile(f"{_DIGIT}+")
# The digit runs the ID-and-NUM pass must look at: long ones, and any in a token (next to a
# letter, _ or -). A short run standing alone ("1 1 1 …") is neither, and skipping it in
# the regex saves a Python step per run.
# Like every pattern here it starts with a plain character set, so the regex engine skips
# fast to the next digit; what comes before is checked once the first digit is consumed.
_TOKEN_DIGIT_RUN = re.compile(
    f"{_DIGIT}(?<!{_DIGIT}{_DIGIT})"
    f"(?:{_DIGIT}{{5,}}|(?<=[A-Za-z_-]{_DIGIT}){_DIGIT}*|{_DIGIT}*(?=[A-Za-z_-]))(?!{_DIGIT})"
)
_LONG_DIGIT_RUN = re.compile(f"{_DIGIT}(?<!{_DIGIT}{_DIGIT}){_DIGIT}{{5,}}")
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_LETTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_TOKEN_LETTERS = _LETTERS | {"_", "-"}


@lru_cache(maxsize=8)
def _pattern(ipv4: bool, ipv6: bool) -> re.Pattern[str]:
    """The first pass but emails, holding only the branches a text can need."""
    parts = [_KEEP] + ([_IPV4] if ipv4 else []) + ([_IPV6] if ipv6 else [])
    parts += [_IDCARD, _CARD, _SSN, _PHONE]
    return re.compile("|".join(parts))


# --- emails, from each "@" outwards ----------------------------------------------------

EMAIL = "EMAIL"
# An email is what `[L0-9._%+-]+@[L0-9-]+(?:\.[L0-9-]+)*\.[L]{2,}` matches, where L is
# a Latin (accents too: josé, exämple), Greek or Cyrillic letter; zero-width spaces and
# joiners count as letters of the local part and the domain (dan\u200b@example.com).
# Its local part runs back from the "@" over _LOCAL characters (read on the reversed
# text); its domain is the run of labels after the "@", up to the last label that starts
# with two letters (the top-level domain), those letters included.
_EMAIL_LETTERS = "A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f\u0370-\u03ff\u0400-\u04ff"
_EMAIL_ZERO_WIDTH = "\u200b-\u200d\u2060"
_LOCAL_RUN = re.compile(rf"[{_EMAIL_LETTERS}{_EMAIL_ZERO_WIDTH}0-9._%+-]*")
_LABEL = rf"[{_EMAIL_LETTERS}{_EMAIL_ZERO_WIDTH}0-9-]+"
_DOMAIN_RUN = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_DOMAIN_END = re.compile(rf".*\.[{_EMAIL_LETTERS}]{{2,}}")  # backs off from the run's end: linear


class _Emails:
    """The emails of one text, met by a scan that resumes at increasing positions."""

    __slots__ = ("_text", "_reversed", "_at", "_end", "_local")

    def __init__(self, text: str) -> None:
        self._text = text
        self._reversed: str | None = None
        self._at = text.find("@")  # the "@" under consideration, -1 when none is left
        self._end = -2  # the end of its email: -2 not read yet, -1 none
        self._local = 0  # the start of its local part's run

    def next(self, pos: int) -> tuple[int, int] | None:
        """(start, end) of the first email a left-to-right regex scan resuming at `pos`
        would match, or None. Each "@" is read once, whatever `pos` does."""
        text = self._text
        while self._at != -1:
            at = self._at
            if at > pos:
                if self._end == -2:
                    self._end = self._domain_end(at)
                    if self._end != -1:
                        self._local = self._local_start(at)
                # The scan may resume inside the local part (after a phone): it starts there.
                start = max(self._local, pos)
                if self._end != -1 and start < at:
                    return start, self._end
            self._at, self._end = text.find("@", at + 1), -2
        return None

    def _domain_end(self, at: int) -> int:
        run = _DOMAIN_RUN.match(self._text, at + 1)
        if run is None:
            return -1
        end = _DOMAIN_END.match(self._text, at + 1, run.end())
        return -1 if end is None else end.end()

    def _local_start(self, at: int) -> int:
        if self._reversed is None:
            self._reversed = self._text[::-1]
        back = len(self._text) - at  # where text[at - 1] sits in the reversed text
        run = _LOCAL_RUN.match(self._reversed, back)
        assert run is not None  # `*` always matches
        return at - (run.end() - back)


# --- URLs, each run of URL characters read once ----------------------------------------

URL = "url"
# A URL is what `(?:https?://|www\.)[^<_URL_STOP>]+[^<_URL_STOP><_URL_TRAILING>]` matches
# (URL_PATTERN). From any start in one run of characters outside _URL_STOP, that regex
# ends at the same place: the run's last character outside _URL_TRAILING. So the end is
# read once per run, not once per start (a run holding a "www." every few characters,
# each start reached after an email, would be read again from each).
_URL_STOP = "\\s<>\"'“”「」《》，。！？、"
_URL_TRAILING = ".,;:!?)]"
URL_PATTERN = rf"(?:https?://|www\.)[^{_URL_STOP}]+[^{_URL_STOP}{re.escape(_URL_TRAILING)}]"
_URL_START = re.compile(r"https?://|www\.")
_URL_RUN = re.compile(rf"[^{_URL_STOP}]*")


class _Urls:
    """The URLs of one text, met by a scan that resumes at increasing positions."""

    __slots__ = ("_text", "_found", "_searched", "_run_end", "_url_end")

    def __init__(self, text: str) -> None:
        self._text = text
        self._found: tuple[int, int] | None = None  # the last URL returned
        self._searched = 0  # no URL starts before this but the one found
        self._run_end = -1  # the end of the last run read, and of the URL in it
        self._url_end = -1

    def next(self, pos: int) -> tuple[int, int] | None:
        """(start, end) of the first URL starting at `pos` or later, or None."""
        found = self._found
        if found is not None and found[0] >= pos:
            return found
        text = self._text
        pos = max(pos, self._searched)
        while start := _URL_START.search(text, pos):
            begin = start.start()
            if begin >= self._run_end:
                run = _URL_RUN.match(text, begin)
                assert run is not None  # `*` always matches
                self._run_end = run.end()
                self._url_end = begin + len(text[begin : run.end()].rstrip(_URL_TRAILING))
            # One character after the scheme, and a last one not trailing punctuation.
            if self._url_end >= start.end() + 2:
                self._found, self._searched = (begin, self._url_end), begin + 1
                return self._found
            pos = begin + 1
        self._found, self._searched = None, len(text) + 1
        return None


class _Pattern:
    """One pattern's matches, met by a scan that resumes at increasing positions."""

    __slots__ = ("_text", "_pattern", "_found")

    def __init__(self, text: str, pattern: re.Pattern[str]) -> None:
        self._text = text
        self._pattern = pattern
        self._found = pattern.search(text)

    def next(self, pos: int) -> re.Match[str] | None:
        # Searched again only once the scan has passed where the last match starts: the
        # pattern's matches are short, so no stretch of text is searched twice over.
        if self._found is not None and self._found.start() < pos:
            self._found = self._pattern.search(self._text, pos)
        return self._found


def find_spans(
    text: str, pattern: re.Pattern[str] | None, emails: bool, urls: bool = False
) -> Iterator[tuple[str, int, int]]:
    """(kind, start, end) of what `(?P<EMAIL>…)|(?P<url>URL_PATTERN)|pattern` would find
    left to right, in linear time: the leftmost match wins, an email where two start at
    one place, then a URL. `kind` is EMAIL, URL or the name of the pattern's group that
    matched.

    `pattern` must not match an empty string, and its matches must be short (it is
    searched again after an email or URL that passed the start of its match)."""
    email_finder = _Emails(text) if emails else None
    url_finder = _Urls(text) if urls else None
    other_finder = _Pattern(text, pattern) if pattern is not None else None
    email = email_finder.next(0) if email_finder is not None else None
    pos = 0
    while True:
        # Each finder only moves forward: what it found is kept while it lies ahead.
        if email is not None and email[0] < pos:
            assert email_finder is not None
            email = email_finder.next(pos)
        url = url_finder.next(pos) if url_finder is not None else None
        other = other_finder.next(pos) if other_finder is not None else None
        other_start = other.start() if other is not None else len(text) + 1
        if email is not None and (url is None or email[0] <= url[0]) and email[0] <= other_start:
            yield EMAIL, email[0], email[1]
            pos = email[1]
        elif url is not None and url[0] <= other_start:
            yield URL, url[0], url[1]
            pos = url[1]
        elif other is not None:
            yield other.lastgroup or "", other.start(), other.end()
            pos = other.end()
        else:
            return


_FULLWIDTH_DIGITS = str.maketrans("０１２３４５６７８９", "0123456789")


@lru_cache(maxsize=1)
def _view_table() -> dict[int, int]:
    """Every decimal digit (Unicode category Nd: full-width, Arabic-Indic, Devanagari,
    mathematical …) to its ASCII digit; non-breaking and narrow spaces to a space; the
    full-width "＠" to "@". Built on the first text that needs it (a tenth of a second)."""
    table = {
        code: ord("0") + unicodedata.decimal(chr(code))
        for code in range(0x80, sys.maxunicode + 1)
        if unicodedata.category(chr(code)) == "Nd"
    }
    table.update(dict.fromkeys(map(ord, "\u00a0\u2007\u2009\u202f"), ord(" ")))
    table[ord("＠")] = ord("@")
    return table


def _view(text: str) -> str:
    """The text as the masker's patterns read it: one character for one, so a match in
    the view is cut from the text at the same positions (see _view_table)."""
    return text if text.isascii() else text.translate(_view_table())


def token_around(text: str, start: int, end: int) -> tuple[int, int]:
    """The bounds of the ASCII token (letters, digits, _ and -) holding text[start:end]."""
    while start > 0 and text[start - 1] in _TOKEN_CHARS:
        start -= 1
    while end < len(text) and text[end] in _TOKEN_CHARS:
        end += 1
    return start, end


# The masker's tokens hold full-width digits too: "7９YY9" is one token, masked whole,
# not "7" in one token and "９YY9" left to become an ID when masked a second time.
_MASK_TOKEN_CHARS = _TOKEN_CHARS | frozenset("０１２３４５６７８９")
_MASK_TOKEN_RUN = re.compile(r"[A-Za-z0-9０-９_-]*")


def _mask_token_around(text: str, start: int, end: int) -> tuple[int, int]:
    """token_around, with full-width digits in tokens."""
    while start > 0 and text[start - 1] in _MASK_TOKEN_CHARS:
        start -= 1
    run = _MASK_TOKEN_RUN.match(text, end)
    assert run is not None  # `*` always matches
    return start, run.end()


def trim_token(text: str, start: int, end: int) -> tuple[int, int]:
    """The bounds without leading or trailing _ and - ("-AB12-" → "AB12")."""
    while text[start] in "_-":
        start += 1
    while text[end - 1] in "_-":
        end -= 1
    return start, end


def _luhn(digits: str) -> bool:
    total = 0
    for i, char in enumerate(reversed(digits)):
        d = int(char)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def phone_key(digits: str) -> str:
    """One spelling of a phone number: without the 00 prefix, and +86 mobiles as dialled at home."""
    digits = digits.removeprefix("00")
    if len(digits) == 13 and digits.startswith("861"):
        return digits[2:]
    return digits


class Masker:
    """Masks the texts of one result, numbering each distinct value once per type."""

    def __init__(self) -> None:
        self._placeholders: dict[tuple[str, str], str] = {}
        self._counts: dict[str, int] = {}

    def text(self, text: str, max_chars: int = MAX_CHARS) -> str:
        """The text masked; past `max_chars` characters it is cut and marked (module doc)."""
        if len(text) > max_chars:
            marked = _TRUNCATION_MARK.search(text, max(0, len(text) - 40))
            if marked is None or marked.start() > max_chars:
                cut = _cut(_view(text), max(0, max_chars))
                return self._mask(text[:cut]) + f"…<{TRUNCATED}_{len(text) - cut}>"
            # Already cut by an earlier masking: masking stays idempotent.
        return self._mask(text)

    def _mask(self, text: str) -> str:
        """The text masked by the compiled reader when it runs (see native.py), else by
        _mask_python, its reference: the two give the same text and numbering."""
        compiled = native.READER
        if compiled is not None:
            if type(text) is not str:
                text = str.__str__(text)  # a str subclass (a StrEnum, numpy.str_): its characters
            return compiled.mask(text, self._placeholders, self._counts)
        return self._mask_python(text)

    def _mask_many(self, values: list[Any], max_chars: int) -> list[str] | None:
        """[self._mask(value) for value in values] (the compiled reader's in one call), or
        None, with nothing masked, unless every value is a string of at most max_chars."""
        compiled = native.READER
        if compiled is not None:
            return compiled.mask_many(values, self._placeholders, self._counts, max_chars)
        if not all(isinstance(v, str) and len(v) <= max_chars for v in values):
            return None
        return [self._mask_python(value) for value in values]

    def _mask_python(self, text: str) -> str:
        """Two passes: emails, IPs, ID cards, cards and phones by pattern; then, from each
        digit run outwards, ID-like tokens (letters with digits) and long digit runs."""
        # The patterns read the view (ASCII digits, plain spaces, "@"); what they find is
        # cut from the text, and keyed in the view (١٣٨… and 138… are one value).
        view = _view(text)
        if not _DIGIT_RUN.search(view) and "@" not in view:
            return text
        first = _pattern("." in view, view.count(":") >= 3)
        replaced: list[tuple[int, int, str]] = []
        for kind, start, end in find_spans(view, first, "@" in view):
            replacement = self._replace(kind, view, start, end)
            if replacement is not None:
                replaced.append((start, end, replacement))
        if not replaced:
            return self._tokens(text, view)
        # The second pass reads the text between the placeholders, piece by piece: a token
        # never runs into a placeholder ("<" and ">" end it), so this is the masked text's
        # second pass without reading the placeholders again.
        pieces: list[str] = []
        copied = 0
        for start, end, replacement in replaced:
            pieces += [self._tokens(text[copied:start], view[copied:start]), replacement]
            copied = end
        pieces.append(self._tokens(text[copied:], view[copied:]))
        return "".join(pieces)

    def _tokens(self, text: str, view: str) -> str:
        """From the first digit run of each token outwards: the token masked whole when
        it is ID-like, else each long digit run in it. Every token is read once, then
        skipped: reading it again for each of its runs ("1_1_1…") would be quadratic."""
        pieces: list[str] = []
        copied = 0  # text before this is in `pieces`
        pos = 0
        while match := _TOKEN_DIGIT_RUN.search(view, pos):
            start, end = match.span()
            left, right = _mask_token_around(view, start, end)
            pos = right
            if right - left < 4:
                continue  # too short for an ID, a long run or a placeholder's insides ("ID_1")
            if left > 0 and _IS_PLACEHOLDER.fullmatch(text, left - 1, right + 1):
                continue  # a placeholder: <NUM_2>
            left, right = trim_token(view, left, right)
            value = view[left:right]
            if (
                len(value) >= 4
                and any(c in _LETTERS for c in value)
                and sum(c.isdigit() for c in value) >= 2
            ):
                pieces += [text[copied:left], self._placeholder("ID", value)]
                copied = right
                continue
            for run in _LONG_DIGIT_RUN.finditer(view, start, pos):
                key = run.group().translate(_FULLWIDTH_DIGITS)
                pieces += [text[copied : run.start()], self._placeholder("NUM", key)]
                copied = run.end()
        if not pieces:
            return text
        pieces.append(text[copied:])
        return "".join(pieces)

    def json(self, value: Any, max_chars: int = MAX_CHARS, *, _depth: int = 0) -> Any:
        """Every string inside a JSON value masked, object keys included (module doc)."""
        if isinstance(value, str):
            return self.text(value, max_chars)
        if not isinstance(value, dict | list):
            return value
        if _depth >= MAX_DEPTH:
            raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, list):
            # A diff's lists (numbers, names) hold dozens of short strings: one call.
            masked = self._mask_many(value, max_chars)
            if masked is not None:
                return masked
            return [self.json(v, max_chars, _depth=_depth + 1) for v in value]
        out: dict[Any, Any] = {}
        suffixes: dict[str, int] = {}  # per masked key, the next suffix to try
        for k, v in value.items():
            key = self.text(k, max_chars) if isinstance(k, str) else k
            if key in out:
                # Two keys masked alike (ann@… and ANN@…): keep both values.
                n = suffixes.get(key, 2)
                while f"{key}~{n}" in out:
                    n += 1
                suffixes[key] = n + 1
                key = f"{key}~{n}"
            out[key] = self.json(v, max_chars, _depth=_depth + 1)
        return out

    def _replace(self, kind: str, source: str, start: int, end: int) -> str | None:
        """The placeholder of a first-pass match in `source` (the view of the text), or
        None to leave it as it is."""
        if kind == "KEEP" or not kind:
            # A placeholder is left as it is. "<NUM_١>" (a placeholder only in the view)
            # is left too, to the token pass, which reads placeholders in the text.
            return None
        value = source[start:end]
        if kind != EMAIL and (
            (start and source[start - 1] in _TOKEN_LETTERS)
            or (end < len(source) and source[end] in _TOKEN_LETTERS)
        ):
            return None  # digits inside a token such as SO-13800138000: the ID pass takes it
        if kind == "IP" and any(int(octet) > 255 for octet in value.split(".")):
            return None
        if kind == "IP6":
            kind = "IP"
        if kind == "SSN":
            kind, key = "NUM", re.sub(r"\D", "", value)
        elif kind in ("PHONE", "CARD", "IDCARD"):
            key = re.sub(r"\D", "", value.translate(_FULLWIDTH_DIGITS))
            if kind == "CARD" and value.isdigit() and not _luhn(value):
                kind = "NUM"  # a plain digit run that fails the card checksum
            elif kind == "PHONE":
                key = phone_key(key)
        elif kind == EMAIL:
            key = _ZERO_WIDTH.sub("", value).lower()
        else:
            key = value
        return self._placeholder(kind, key)

    def _placeholder(self, kind: str, key: str) -> str:
        placeholder = self._placeholders.get((kind, key))
        if placeholder is None:
            self._counts[kind] = self._counts.get(kind, 0) + 1
            placeholder = f"<{kind}_{self._counts[kind]}>"
            self._placeholders[(kind, key)] = placeholder
        return placeholder


def mask_text(text: str, max_chars: int = MAX_CHARS) -> str:
    """One text masked on its own (its own numbering)."""
    return Masker().text(text, max_chars)


_TRUNCATION_MARK = re.compile(rf"…<{TRUNCATED}_\d+>\Z")
# Characters a secret (email, phone, card, ID) is written with; a space joins two digit
# groups ("138 0013 8000"). A cut inside such a run backs off to its start.
_SECRET_CHARS = frozenset("0123456789０１２３４５６７８９._%+-@()") | _LETTERS
_GROUP_CHARS = frozenset("0123456789０１２３４５６７８９()")
_CUT_BACKOFF = 64


def _joined(text: str, i: int) -> bool:
    char = text[i]
    if char in _SECRET_CHARS:
        return True
    return (
        char == " "
        and 0 < i < len(text) - 1
        and text[i - 1] in _GROUP_CHARS
        and text[i + 1] in _GROUP_CHARS
    )


def _cut(text: str, max_chars: int) -> int:
    """Where to cut a text longer than max_chars: at max_chars, or before the secret-like
    run the cut would split (at most _CUT_BACKOFF characters earlier)."""
    cut = max_chars
    if cut == 0 or not (_joined(text, cut - 1) and _joined(text, cut)):
        return cut
    floor = max(0, cut - _CUT_BACKOFF)
    i = cut
    while i > floor and _joined(text, i - 1):
        i -= 1
    # A run longer than the back-off, or all the text kept, is masked as far as it goes
    # (IDs, long digit runs) rather than dropped whole.
    if i == 0 or (i == floor and _joined(text, i - 1)):
        return cut
    return i


REDACTED_FIELDS = (
    "input",
    "edge_output",
    "cloud_output",
    "diff",
    "edge_error_message",
    "cloud_error_message",
)


def fit_masked(masked: str, limit: int) -> str:
    """A masked text in at most `limit` characters (a column's width): when it is longer,
    cut before any placeholder the cut would split and marked `…<TRUNCATED_n>`, n the
    characters of the masked text dropped. Half a placeholder (`<EMAIL_1` of `<EMAIL_12>`)
    would read as another value."""
    if len(masked) <= limit:
        return masked
    cut = max(0, limit - len(f"…<{TRUNCATED}_{len(masked)}>"))
    for found in _IS_PLACEHOLDER.finditer(masked, max(0, cut - 20), cut + 20):
        if found.start() < cut < found.end():
            cut = found.start()
    return masked[:cut] + f"…<{TRUNCATED}_{len(masked) - cut}>"


def redact_payload(
    payload: dict[str, Any], *, max_chars: int = MAX_CHARS, masker: Masker | None = None
) -> dict[str, Any]:
    """The payload with every text field masked by one Masker (shared numbering: `masker`,
    which may have masked other fields of the same result already), each string cut to
    `max_chars` characters."""
    masker = masker or Masker()
    return {k: masker.json(v, max_chars) if k in REDACTED_FIELDS else v for k, v in payload.items()}
