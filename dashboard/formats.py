"""How the dashboard writes numbers and text: one place, so a page and its tests agree.

Anything not written by the dashboard itself (task and model names, reasons, notes,
payloads, ids from uploaded files, error details) goes into Markdown through `text()`,
so it is shown as written: never as a link, an image, a colour, maths or code."""

from __future__ import annotations

import re
from datetime import datetime

# Every character Streamlit's Markdown gives a meaning to.
_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~<>$:&=^])")
_LEADING = re.compile(r"^[ \t]+", re.MULTILINE)


def text(value: object) -> str:
    """`value` as literal text in Markdown: special characters escaped, line breaks kept
    (as hard breaks), and leading spaces kept as no-break spaces so an indented line is
    never read as a code block."""
    escaped = _SPECIAL.sub(r"\\\1", str(value))
    escaped = _LEADING.sub(lambda m: "\u00a0" * len(m.group().expandtabs(4)), escaped)
    return escaped.replace("\r\n", "\n").replace("\n", "  \n")


def line(value: object) -> str:
    """`value` as literal text on one line (breaks folded into spaces), e.g. in a list."""
    return text(" ".join(str(value).split()))


NONE = "—"


def percent(value: float | None) -> str:
    """A rate as a percentage with one decimal ("94.3%"); "—" without data."""
    return NONE if value is None else f"{value:.1%}"


def interval(low: float | None, high: float | None) -> str:
    """A Wilson interval as "91.0–96.4%"; "—" without data."""
    if low is None or high is None:
        return NONE
    return f"{low * 100:.1f}–{high * 100:.1f}%"


def money(value: float | None) -> str:
    """An amount in the cost unit with two decimals and its sign ("-40.57")."""
    return NONE if value is None else f"{value:,.2f}"


def moment(value: datetime | None) -> str:
    """A time in UTC to the minute ("2026-11-30 02:57 UTC")."""
    return NONE if value is None else f"{value:%Y-%m-%d %H:%M} UTC"
