"""Times that come from outside: a time without a timezone is UTC, everywhere.

`UTCTime` is the type of every query parameter that takes a time, so `since=2026-11-30T00:00`
means midnight UTC and compares with the aware times the database returns.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator


def as_utc(value: datetime) -> datetime:
    """`value` in UTC; a naive time is read as UTC. ValueError when UTC cannot hold it."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:59-01:00 is past the last time Python holds
        raise ValueError(f"{value.isoformat()} is out of range in UTC") from None


UTCTime = Annotated[datetime, AfterValidator(as_utc)]


def duration(seconds: int) -> str:
    """A span in words: 86400 → "24h", 7200 → "2h", 5400 → "90m", 45 → "45s"."""
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
