"""Times that come from outside: a time without a timezone is UTC, everywhere.

`UTCTime` is the type of every query parameter that takes a time, so `since=2026-11-30T00:00`
means midnight UTC and compares with the aware times the database returns.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator


def as_utc(value: datetime) -> datetime:
    """`value` in UTC; a naive time is read as UTC. ValueError when UTC cannot hold it."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:59-01:00 is past the last time Python holds
        raise ValueError(f"{value.isoformat()} is out of range in UTC") from None


# An ISO 8601 date-time, its offset optional. pydantic alone also reads a number as seconds
# since 1970 and a bare date as its midnight, which a `date-time` in the document is not.
DATE_TIME_OFFSET_OPTIONAL = r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]+)?)?([Zz]|[+-][0-9]{2}:[0-9]{2})?"
_DATE_TIME = re.compile(DATE_TIME_OFFSET_OPTIONAL)
FIRST_MOMENT = datetime.min.replace(tzinfo=UTC)
LAST_MOMENT = datetime.max.replace(tzinfo=UTC)


def _date_time_text(value: Any) -> Any:
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str) or not _DATE_TIME.fullmatch(value):
        raise ValueError(
            "not a date-time; give one as 2026-11-30T00:00:00Z (RFC 3339; without an offset "
            "it is UTC)"
        )
    return value


def _within_utc(value: datetime) -> datetime:
    """`value` in UTC; a time past the first or last day UTC holds here (the first day with
    a positive offset, the last with a negative one) is that first or last moment: a bound
    no stored time lies beyond."""
    try:
        return as_utc(value)
    except ValueError:
        return FIRST_MOMENT if value.year == datetime.min.year else LAST_MOMENT


UTCTime = Annotated[datetime, BeforeValidator(_date_time_text), AfterValidator(_within_utc)]


def duration(seconds: int) -> str:
    """A span in words: 86400 → "24h", 7200 → "2h", 5400 → "90m", 45 → "45s"."""
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
