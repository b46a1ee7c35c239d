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
"""

from __future__ import annotations

import re
from typing import Any

TYPES = ("EMAIL", "IP", "IDCARD", "CARD", "PHONE", "ID", "NUM")

_DIGIT = "[0-9０-９]"
PHONE = (
    # Each branch starts with a plain character, and "not after a digit" is checked once the
    # first digit is consumed: the regex engine then skips fast over text without digits.
    r"(?:\+|00)\d{1,3}[ -]?(?:\(\d{1,4}\)[ -]?)?\d{1,4}(?:[ -]?\d{2,4}){1,4}(?!\d)"  # international
    r"|1(?<!\d1)[3-9]\d[ -]?\d{4}[ -]?\d{4}(?!\d)"  # Chinese mobile
    r"|(?:\(0\d{2,3}\)|0(?<!\d0)\d{2,3})[ -]?\d{7,8}(?!\d)"  # Chinese landline
    r"|(?:\(\d{3}\)|\d(?<!\d\d)\d{2})[ .-]\d{3}[ .-]\d{4}(?!\d)"  # North American, 400 lines
)
_PATTERN = re.compile(
    "|".join(
        [
            # An existing placeholder stays as it is (masking twice changes nothing).
            rf"(?P<KEEP><(?:{'|'.join(TYPES)})_\d+>)",
            r"(?P<EMAIL>[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,})",
            r"(?P<IP>(?<![\d.])(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)(?![\d.])"
            r"|(?<![:\w])(?:[0-9A-Fa-f]{1,4}:){3,7}[0-9A-Fa-f]{1,4}(?![:\w]))",
            # Chinese resident ID: 17 digits and a check digit or X.
            r"(?P<IDCARD>(?<![0-9A-Za-z])\d{17}[\dXx](?![0-9A-Za-z]))",
            # Cards: 13 to 19 digits, plain or in groups of four.
            r"(?P<CARD>(?<!\d)(?:\d{4}[ -]){3}\d{1,7}(?!\d)|(?<!\d)\d{13,19}(?!\d))",
            rf"(?P<PHONE>{PHONE})",
            # ID-like tokens: letters and at least two digits, five characters or more.
            r"(?P<ID>(?<![A-Za-z0-9_-])(?=(?:[A-Za-z_-]*\d){2})(?=[A-Za-z0-9_-]*[A-Za-z])"
            r"[A-Za-z0-9][A-Za-z0-9_-]{3,}(?<=[A-Za-z0-9])(?![A-Za-z0-9_-]))",
            rf"(?P<NUM>{_DIGIT}{{6,}})",
        ]
    )
)
_FULLWIDTH_DIGITS = str.maketrans("０１２３４５６７８９", "0123456789")


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

    def text(self, text: str) -> str:
        return _PATTERN.sub(self._replace, text)

    def json(self, value: Any) -> Any:
        """Every string inside a JSON value, masked (object keys are names, not data)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.json(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.json(v) for v in value]
        return value

    def _replace(self, match: re.Match[str]) -> str:
        kind = match.lastgroup
        value = match.group()
        if kind == "KEEP" or kind is None:
            return value
        if kind in ("PHONE", "CARD", "IDCARD", "NUM"):
            key = re.sub(r"\D", "", value.translate(_FULLWIDTH_DIGITS))
            if kind == "CARD" and value.isdigit() and not _luhn(value):
                kind = "NUM"  # a plain digit run that fails the card checksum
            elif kind == "PHONE":
                key = phone_key(key)
        elif kind == "EMAIL":
            key = value.lower()
        else:
            key = value
        placeholder = self._placeholders.get((kind, key))
        if placeholder is None:
            self._counts[kind] = self._counts.get(kind, 0) + 1
            placeholder = f"<{kind}_{self._counts[kind]}>"
            self._placeholders[(kind, key)] = placeholder
        return placeholder


def mask_text(text: str) -> str:
    """One text masked on its own (its own numbering)."""
    return Masker().text(text)


REDACTED_FIELDS = (
    "input",
    "edge_output",
    "cloud_output",
    "diff",
    "edge_error_message",
    "cloud_error_message",
)


def redact_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """The payload with every text field masked by one Masker (shared numbering)."""
    masker = Masker()
    return {k: masker.json(v) if k in REDACTED_FIELDS else v for k, v in payload.items()}
