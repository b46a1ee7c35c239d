"""How the dashboard writes numbers: one place, so a page and its tests agree."""

from __future__ import annotations

from datetime import datetime

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
