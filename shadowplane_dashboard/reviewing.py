"""How the review page shows a blind item (pure): texts escaped for Streamlit's markdown,
every difference the A/B diff names highlighted where it is written in each answer (and
the numbers, names and negations one answer holds in the input), and the diff itself as
short lines.

It reads only the blind view (`controlplane.review.actions.claim`): sides are A and B,
and nothing here could name which answer came from where: what is highlighted in an
answer depends on the two answers and the A/B diff alone."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from controlplane.compare.comparators import MAX_CHARS, normalise_label
from shadowplane_dashboard import formats, locate
from shadowplane_dashboard.locate import Span

# Highlight colour of the places where the answers differ.
MARK = "orange-background"
# Checks of text_conservation whose values are words and numbers found in the texts.
_WORD_CHECKS = ("numbers", "negations", "spans")
SIDES = ("a", "b")
# The most characters of an input looked at for marks: the page is drawn on every key, and
# an input (a long-context task's, or a hostile router's) may hold a megabyte. As much as
# the comparator reads of an answer.
MAX_INPUT_READ = MAX_CHARS


def escape(text: str) -> str:
    """Text shown as itself in markdown (no formatting, links, colours, maths or code)."""
    return formats.text(text)


def highlighted(text: str, places: Sequence[Span]) -> str:
    """The text as markdown with the places given highlighted (overlapping places as one;
    a place over several lines as one highlight per line)."""
    out, at = [], 0
    for start, end in _lines_of(text, places):
        out.append(_piece(text, at, start))
        out.append(f":{MARK}[{escape(text[start:end])}]")
        at = end
    out.append(_piece(text, at, len(text)))
    return "".join(out)


def _lines_of(text: str, places: Sequence[Span]) -> Iterator[Span]:
    """The places within the text, merged where they overlap or touch, cut at line breaks,
    without the spaces they start or end with; in order."""
    merged: list[list[int]] = []
    for start, end in sorted((max(0, s), min(len(text), e)) for s, e in places):
        if start >= end:
            continue
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    for start, end in merged:
        at = start
        for piece in text[start:end].splitlines(keepends=True):
            stripped = piece.strip()
            if stripped:
                first = at + piece.index(stripped[0])
                yield first, first + len(stripped)
            at += len(piece)


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


def marks(item: Mapping[str, Any], side: str) -> list[Span]:
    """Where answer `side` ("a" or "b") of a blind pair differs from the other, as places
    in its text as shown (`as_text`): the label it gives; the fields whose values differ
    (key and value); the numbers, negations and named spans only it holds, and the words
    its counterpart negates where only the other answer holds a negation."""
    diff = item.get("diff")
    if not isinstance(diff, dict) or side not in SIDES:
        return []
    other = "b" if side == "a" else "a"
    text = as_text(item.get(side))
    out = _label_marks(text, diff.get("label"), side)
    out += _field_marks(text, diff.get("fields"))
    out += locate.numbers(text, only_in(diff, "numbers", side))
    out += locate.names(text, only_in(diff, "spans", side))
    out += locate.negations(text, only_in(diff, "negations", side))
    theirs = as_text(item.get(other))
    negated = locate.negations(theirs, only_in(diff, "negations", other))
    out += locate.counterparts(text, theirs, negated)
    return out


def input_marks(item: Mapping[str, Any]) -> list[Span]:
    """Where the input holds what one answer holds and the other lacks: numbers, named
    spans and negations only one answer holds, and the values of differing fields; in its
    first MAX_INPUT_READ characters (a place the cut may split is left out)."""
    diff = item.get("diff")
    if not isinstance(diff, dict):
        return []
    whole = as_text(item.get("input"))
    text = whole[:MAX_INPUT_READ]
    out = _input_marks(text, diff)
    if len(whole) > len(text):
        out = [place for place in out if place[1] < len(text)]
    return out


def _input_marks(text: str, diff: Mapping[str, Any]) -> list[Span]:
    out: list[Span] = []
    for side in SIDES:
        out += locate.numbers(text, only_in(diff, "numbers", side))
        out += locate.names(text, only_in(diff, "spans", side))
        out += locate.negations(text, only_in(diff, "negations", side))
    if isinstance(diff.get("fields"), dict):
        values = [
            pair.get(side)
            for pair in diff["fields"].values()
            if isinstance(pair, dict)
            for side in SIDES
        ]
        numeric = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
        out += locate.numbers(text, {_number(v) for v in numeric})
        out += locate.words(text, [v for v in values if isinstance(v, str) and len(v.strip()) > 1])
    return out


def _label_marks(text: str, label: Any, side: str) -> list[Span]:
    """The label this answer gives: the whole answer when it is that label as the
    comparator reads it, else where the label is written in it."""
    if not isinstance(label, dict) or not isinstance(label.get(side), str):
        return []
    if normalise_label(text) == label[side]:
        start = len(text) - len(text.lstrip())
        return [(start, len(text.rstrip()))]
    return locate.words(text, [label[side]])


def _field_marks(text: str, fields: Any) -> list[Span]:
    """Each differing field of a JSON answer, its key and its value."""
    if not isinstance(fields, dict) or not fields:
        return []
    found = locate.fields(text)
    return [found[name] for name in fields if name in found]


def _number(value: float) -> str:
    """A number spelt as the comparator spells the numbers it reads (2.0 is 2)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return repr(value)


def only_in(diff: Any, check: str, side: str) -> list[str]:
    """The words or numbers of a text check (numbers, negations, spans) only answer
    `side` holds."""
    if not isinstance(diff, dict) or not isinstance(diff.get(check), dict):
        return []
    return _words(diff[check].get(f"only_in_{side}"))


def _short(value: Any) -> str:
    """A value on one line (line breaks folded), at most 200 characters."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= 200 else text[:199] + "…"


def _counted(n: Any, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


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
        lines.append(f"A has {_counted(s.get('a'), 'sentence')}, B has {s.get('b')}")
    if isinstance(diff.get("length_ratio"), dict):
        n = diff["length_ratio"]
        lines.append(
            f"A is {_counted(n.get('a'), 'word')} long, B {n.get('b')} "
            "(a number or a Chinese character counts as a word)"
        )
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
