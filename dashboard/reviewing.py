"""How the review page shows a blind item (pure): texts escaped for Streamlit's markdown,
the words the A/B diff names highlighted where they occur, and the diff itself as short
lines.

It reads only the blind view (`controlplane.review.actions.claim`): sides are A and B,
and nothing here could name which answer came from where."""

from __future__ import annotations

import json
import re
from typing import Any

from dashboard import formats

# Highlight colour of the words where the answers differ.
MARK = "orange-background"
# Checks of text_conservation whose values are words and numbers found in the texts.
_WORD_CHECKS = ("numbers", "negations", "spans")


def escape(text: str) -> str:
    """Text shown as itself in markdown (no formatting, links, colours, maths or code)."""
    return formats.text(text)


def highlighted(text: str, words: list[str]) -> str:
    """The text as markdown with each of the words (whole, where they occur) highlighted."""
    found = sorted({w for w in words if w and w.strip()}, key=len, reverse=True)
    if not found:
        return escape(text)
    pattern = re.compile(
        "|".join(rf"(?<!\w){re.escape(w)}(?!\w)" if w[0].isalnum() else re.escape(w) for w in found)
    )
    out, at = [], 0
    for match in pattern.finditer(text):
        out.append(_piece(text, at, match.start()))
        out.append(f":{MARK}[{escape(match.group())}]")
        at = match.end()
    out.append(_piece(text, at, len(text)))
    return "".join(out)


def _piece(text: str, start: int, end: int) -> str:
    """text[start:end] escaped; spaces it starts with are kept as spaces when the piece
    starts within a line (only a line's own indent is kept as no-break spaces)."""
    piece = text[start:end]
    if start == 0 or text[start - 1] == "\n":
        return escape(piece)
    inside = len(piece) - len(piece.lstrip(" \t"))
    return piece[:inside] + escape(piece[inside:])


def as_text(value: Any) -> str:
    """An input or an output as a reviewer reads it: its text, else compact JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("text"), str):
        return value["text"]
    return json.dumps(value, ensure_ascii=False, indent=1, sort_keys=True)


def _words(value: Any) -> list[str]:
    if isinstance(value, list):
        return [str(v) for v in value if v is not None]
    return [] if value is None else [str(value)]


def marks(diff: Any, side: str) -> list[str]:
    """What to highlight in answer `side` ("a" or "b"): the words only it holds, its label
    or the values of its fields that differ."""
    if not isinstance(diff, dict):
        return []
    out = only_in(diff, side)
    if isinstance(diff.get("label"), dict):
        out += _words(diff["label"].get(side))
    if isinstance(diff.get("fields"), dict):
        for pair in diff["fields"].values():
            if isinstance(pair, dict) and isinstance(pair.get(side), str | int | float):
                out += _words(pair[side])
    return out


def input_marks(diff: Any) -> list[str]:
    """What to highlight in the input: the words one answer holds and the other lacks."""
    return only_in(diff, "a") + only_in(diff, "b")


def only_in(diff: Any, side: str) -> list[str]:
    """The words and numbers only answer `side` holds (text checks)."""
    if not isinstance(diff, dict):
        return []
    out: list[str] = []
    for check in _WORD_CHECKS:
        if isinstance(diff.get(check), dict):
            out += _words(diff[check].get(f"only_in_{side}"))
    return out


def _short(value: Any) -> str:
    """A value on one line (line breaks folded), at most 200 characters."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= 200 else text[:199] + "…"


def differences(diff: Any) -> list[str]:
    """The diff as one plain line per difference (A/B terms only; line breaks in values
    folded into spaces)."""
    if not isinstance(diff, dict):
        return []
    lines = []
    for side in ("a", "b"):
        if side in diff:
            lines.append(f"{side.upper()} does not fit the task's format: {_short(diff[side])}")
    if isinstance(diff.get("label"), dict):
        label = diff["label"]
        lines.append(f"label: A says {_short(label.get('a'))}, B says {_short(label.get('b'))}")
    if isinstance(diff.get("fields"), dict):
        for name, pair in diff["fields"].items():
            if isinstance(pair, dict):
                lines.append(f"{name}: A {_short(pair.get('a'))}, B {_short(pair.get('b'))}")
    if isinstance(diff.get("paths"), list):
        lines.append("differs at " + ", ".join(str(p) for p in diff["paths"][:20]))
    if isinstance(diff.get("sentences"), dict):
        s = diff["sentences"]
        lines.append(f"sentences: A {s.get('a')}, B {s.get('b')}")
    if isinstance(diff.get("length_ratio"), dict):
        n = diff["length_ratio"]
        lines.append(f"length: A {n.get('a')} characters, B {n.get('b')}")
    if isinstance(diff.get("too_long"), dict):
        n = diff["too_long"]
        lines.append(
            f"too long to compare: A {n.get('a')} characters, B {n.get('b')} "
            f"(at most {n.get('max_chars')})"
        )
    for check in _WORD_CHECKS:
        if isinstance(diff.get(check), dict):
            only_a = ", ".join(_words(diff[check].get("only_in_a"))) or "none"
            only_b = ", ".join(_words(diff[check].get("only_in_b"))) or "none"
            lines.append(f"{check} only in A: {only_a}; only in B: {only_b}")
    # One line each, whatever a field name or a word held.
    return [" ".join(x.split()) for x in lines]


def corrected_value(text: str) -> Any:
    """The corrected answer a reviewer typed: JSON when it starts like an object, a list or
    a quoted string; any other text as it is (a label, a rewrite); None when empty.
    ValueError names the field and where the JSON breaks."""
    text = text.strip()
    if not text:
        return None
    if text[0] not in '{["':
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"corrected: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
            "type a label or a text as it is, an object or a list as JSON"
        ) from None
