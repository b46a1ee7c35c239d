"""Masking personal data in payload text before it is stored (`payload_policy: redacted`).

Emails, phone numbers (Chinese mobile and landline, international, North American),
national-ID-like numbers, bank-card-like numbers, IP addresses, ID-like tokens and long
digit runs are replaced by typed, numbered placeholders: `<EMAIL_1>`, `<PHONE_2>`,
`<IDCARD_1>`, `<CARD_1>`, `<IP_1>`, `<ID_3>`, `<NUM_2>`. One `Masker` serves one result,
so the same value gets the same placeholder in its input, both outputs, the diff and the
error messages: a reviewer still sees that two outputs name the same thing. Values are
matched in a normal form (digits only for phones and cards, lower case for emails).

Masking is idempotent: placeholders are left as they are. Comparison runs on the original
text; only masked text reaches the database.

A string longer than `max_chars` (default MAX_CHARS) is masked on its first `max_chars`
characters (less the end of a token cut in two, so no half of a secret is kept) and the
rest is dropped, marked by `…<TRUNCATED_n>` where n is the number of characters dropped.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

TYPES = ("EMAIL", "IP", "IDCARD", "CARD", "PHONE", "ID", "NUM")
# The most characters of one text that are read (compared, masked): settings'
# `compare_max_chars` overrides it per call.
MAX_CHARS = 32_000
TRUNCATED = "TRUNCATED"

_DIGIT = "[0-9０-９]"
PHONE = (
    # Each branch starts with a plain character, and "not after a digit" is checked once the
    # first digit is consumed: the regex engine then skips fast over text without digits.
    r"(?:\+|0(?<!\d0)0)\d{1,3}[ -]?(?:\(\d{1,4}\)[ -]?)?\d{1,4}(?:[ -]?\d{2,4}){1,4}(?!\d)"  # international
    r"|1(?<!\d1)[3-9]\d[ -]?\d{4}[ -]?\d{4}(?!\d)"  # Chinese mobile
    r"|(?:\(0\d{2,3}\)|0(?<!\d0)\d{2,3})[ -]?\d{7,8}(?!\d)"  # Chinese landline
    r"|(?:\(\d{3}\)|\d(?<!\d\d)\d{2})[ .-]\d{3}[ .-]\d{4}(?!\d)"  # North American, 400 lines
)
_KEEP = rf"(?P<KEEP><(?:{'|'.join(TYPES)}|{TRUNCATED})_\d+>)"
_EMAIL = r"(?P<EMAIL>[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,})"
_IPV4 = r"(?P<IP>\d(?<![\d.]\d)\d{0,2}(?:\.\d{1,3}){3}(?![\d.]))"
_IPV6 = (
    r"(?P<IP6>[0-9A-Fa-f](?<![:\w][0-9A-Fa-f])[0-9A-Fa-f]{0,3}(?::[0-9A-Fa-f]{1,4}){3,7}(?![:\w]))"
)
# Chinese resident ID: 17 digits and a check digit or X. Cards: 13 to 19 digits, plain or
# in groups of four. Like PHONE, each starts with a plain character (fast skipping) and
# checks what comes before once its first digit is consumed.
_IDCARD = r"(?P<IDCARD>\d(?<![0-9A-Za-z]\d)\d{16}[\dXx](?![0-9A-Za-z]))"
_CARD = r"(?P<CARD>\d(?<!\d\d)\d{3}[ -](?:\d{4}[ -]){2}\d{1,7}(?!\d)|\d(?<!\d\d)\d{12,18}(?!\d))"
_PHONE = rf"(?P<PHONE>{PHONE})"
_DIGIT_RUN = re.compile(f"{_DIGIT}+")
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_LETTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_TOKEN_LETTERS = _LETTERS | {"_", "-"}


@lru_cache(maxsize=8)
def _pattern(email: bool, ipv4: bool, ipv6: bool) -> re.Pattern[str]:
    """The first pass, holding only the branches a text can need (no "@": no email branch)."""
    parts = [_KEEP] + ([_EMAIL] if email else []) + ([_IPV4] if ipv4 else [])
    parts += ([_IPV6] if ipv6 else []) + [_IDCARD, _CARD, _PHONE]
    return re.compile("|".join(parts))


_FULLWIDTH_DIGITS = str.maketrans("０１２３４５６７８９", "0123456789")


def token_around(text: str, start: int, end: int) -> tuple[int, int]:
    """The bounds of the ASCII token (letters, digits, _ and -) holding text[start:end]."""
    while start > 0 and text[start - 1] in _TOKEN_CHARS:
        start -= 1
    while end < len(text) and text[end] in _TOKEN_CHARS:
        end += 1
    return start, end


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
                cut = _cut(text, max(0, max_chars))
                return self._mask(text[:cut]) + f"…<{TRUNCATED}_{len(text) - cut}>"
            # Already cut by an earlier masking: masking stays idempotent.
        return self._mask(text)

    def _mask(self, text: str) -> str:
        """Two passes: emails, IPs, ID cards, cards and phones by pattern; then, from each
        digit run outwards, ID-like tokens (letters with digits) and long digit runs."""
        if not _DIGIT_RUN.search(text) and "@" not in text:
            return text
        first = _pattern("@" in text, "." in text, text.count(":") >= 3)
        return self._tokens(first.sub(self._replace, text))

    def _tokens(self, text: str) -> str:
        pieces: list[str] = []
        copied = 0  # text before this is in `pieces`
        scanned = 0  # digit runs before this belong to a token already handled
        for match in _DIGIT_RUN.finditer(text):
            start, end = match.span()
            if start < scanned:
                continue
            left, right = token_around(text, start, end)
            if left > 0 and text[left - 1] == "<" and right < len(text) and text[right] == ">":
                scanned = right
                continue  # a placeholder: <NUM_2>
            left, right = trim_token(text, left, right)
            token = text[left:right]
            if (
                len(token) >= 4
                and any(c in _LETTERS for c in token)
                and sum(c.isdigit() for c in token) >= 2
            ):
                kind, key, span = "ID", token, (left, right)
                scanned = right
            elif end - start >= 6:
                kind, key, span = "NUM", match.group().translate(_FULLWIDTH_DIGITS), (start, end)
            else:
                continue
            pieces += [text[copied : span[0]], self._placeholder(kind, key)]
            copied = span[1]
        if not pieces:
            return text
        pieces.append(text[copied:])
        return "".join(pieces)

    def json(self, value: Any, max_chars: int = MAX_CHARS) -> Any:
        """Every string inside a JSON value, masked (object keys are names, not data)."""
        if isinstance(value, str):
            return self.text(value, max_chars)
        if isinstance(value, dict):
            return {k: self.json(v, max_chars) for k, v in value.items()}
        if isinstance(value, list):
            return [self.json(v, max_chars) for v in value]
        return value

    def _replace(self, match: re.Match[str]) -> str:
        kind = match.lastgroup
        value = match.group()
        if kind == "KEEP" or kind is None:
            return value
        start, end = match.span()
        source = match.string
        if kind != "EMAIL" and (
            (start and source[start - 1] in _TOKEN_LETTERS)
            or (end < len(source) and source[end] in _TOKEN_LETTERS)
        ):
            return value  # digits inside a token such as SO-13800138000: the ID pass takes it
        if kind == "IP" and any(int(octet) > 255 for octet in value.split(".")):
            return value
        if kind == "IP6":
            kind = "IP"
        if kind in ("PHONE", "CARD", "IDCARD"):
            key = re.sub(r"\D", "", value.translate(_FULLWIDTH_DIGITS))
            if kind == "CARD" and value.isdigit() and not _luhn(value):
                kind = "NUM"  # a plain digit run that fails the card checksum
            elif kind == "PHONE":
                key = phone_key(key)
        elif kind == "EMAIL":
            key = value.lower()
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
    # A run longer than the back-off is masked as far as it goes (IDs, long digit runs).
    return cut if i == floor and floor > 0 else i


REDACTED_FIELDS = (
    "input",
    "edge_output",
    "cloud_output",
    "diff",
    "edge_error_message",
    "cloud_error_message",
)


def redact_payload(payload: dict[str, Any], *, max_chars: int = MAX_CHARS) -> dict[str, Any]:
    """The payload with every text field masked by one Masker (shared numbering), each
    string cut to `max_chars` characters."""
    masker = Masker()
    return {k: masker.json(v, max_chars) if k in REDACTED_FIELDS else v for k, v in payload.items()}
