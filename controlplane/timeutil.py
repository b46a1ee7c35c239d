"""Times that come from outside: a time without a timezone is UTC, everywhere.

`UTCTime` is the type of every query parameter that takes a time, so `since=2026-11-30T00:00`
means midnight UTC and compares with the aware times the database returns.
"""

from __future__ import annotations

import calendar
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, WithJsonSchema


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
# Its parts are groups, read by _date_time_text: year, month, day, hour, minute, second,
# fraction, Z, the offset's sign, hours and minutes.
DATE_TIME_OFFSET_OPTIONAL = (
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2})"
    r"(?::([0-9]{2})(?:\.([0-9]+))?)?(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))?"
)
FIRST_MOMENT = datetime.min.replace(tzinfo=UTC)
LAST_MOMENT = datetime.max.replace(tzinfo=UTC)


# A time parameter as the server reads it, and as the document gives it: an RFC 3339
# date-time whose seconds and offset may be left out (no offset: UTC), "T" or a space
# between date and time. Each field within its range, a day within its month (February
# always up to 29). A leap second (:60) is read as the last instant of its minute, and year
# 0000 as the first moment (both are date-times to RFC 3339; Python holds neither).
_MONTH_DAY = (
    r"(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
    r"|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|[12][0-9]))"
)
TIME_PATTERN = (
    rf"^[0-9]{{4}}-{_MONTH_DAY}[Tt ](?:[01][0-9]|2[0-3]):[0-5][0-9]"
    r"(?::(?:[0-5][0-9]|60)(?:\.[0-9]+)?)?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])?$"
)
# A result's `ts` as ingest reads it (the document gives it): the same, but no leap second
# and no year 0000 (Python holds neither, and ingest refuses the item); February 29 of a
# common year is refused too.
TS_PATTERN = (
    r"^(?:000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})"
    rf"-{_MONTH_DAY}[Tt ](?:[01][0-9]|2[0-3]):[0-5][0-9]"
    r"(?::[0-5][0-9](?:\.[0-9]+)?)?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])?$"
)
_TIME_PARTS = re.compile(DATE_TIME_OFFSET_OPTIONAL)
_NOT_A_TIME = (
    "not a date-time; give one as 2026-11-30T00:00:00Z (RFC 3339; without an offset it is UTC)"
)


def _date_time_text(value: Any) -> Any:
    if isinstance(value, datetime):
        return value
    found = _TIME_PARTS.fullmatch(value) if isinstance(value, str) else None
    if found is None:
        raise ValueError(_NOT_A_TIME)
    year, month, day, hour, minute = (int(found.group(i)) for i in range(1, 6))
    second = int(found.group(6) or 0)
    fraction = found.group(7) or ""
    sign, off_hours, off_minutes = found.group(9), found.group(10), found.group(11)
    problem = _parts_problem(found)
    if problem is not None:
        raise ValueError(f"not a date-time: {problem}")
    if year == 0:
        return FIRST_MOMENT  # before any time stored
    micro = int(fraction[:6].ljust(6, "0"))
    if second == 60:  # a leap second: the last instant of its minute
        second, micro = 59, 999_999
    zone = UTC
    if sign is not None:
        offset = timedelta(hours=int(off_hours), minutes=int(off_minutes))
        zone = timezone(-offset if sign == "-" else offset)
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=zone)


def out_of_range(text: str, *, leap_second: bool = True, year_zero: bool = True) -> str | None:
    """What is out of range in a text spelled as a date-time (DATE_TIME_OFFSET_OPTIONAL),
    as a reason: a month, a day of its month, an hour, a minute, a second, an offset; with
    `leap_second` False also a second of 60, with `year_zero` False year 0000. None when
    nothing is (or the text is not so spelled)."""
    found = _TIME_PARTS.fullmatch(text)
    if found is None:
        return None
    problem = _parts_problem(found)
    if problem is None and not leap_second and int(found.group(6) or 0) == 60:
        problem = "second 60 (a leap second) cannot be stored; send :59.999999 of its minute"
    if problem is None and not year_zero and int(found.group(1)) == 0:
        problem = "year 0000 is before any time that can be stored"
    return problem


def _parts_problem(found: re.Match[str]) -> str | None:
    """What is out of range among a date-time's parts (a match of _TIME_PARTS), the offset
    named before any other; None when nothing is."""
    sign, off_hours, off_minutes = found.group(9), found.group(10), found.group(11)
    if sign is not None and (int(off_hours) > 23 or int(off_minutes) > 59):
        return f"the offset {sign}{off_hours}:{off_minutes} is past ±23:59"
    year, month, day, hour, minute = (int(found.group(i)) for i in range(1, 6))
    return _out_of_range(year, month, day, hour, minute, int(found.group(6) or 0))


def _out_of_range(
    year: int, month: int, day: int, hour: int, minute: int, second: int
) -> str | None:
    if not 1 <= month <= 12:
        return f"month {month:02d} is not one of 01 to 12"
    # Year 0000 is a leap year (proleptic Gregorian), as 2000 is.
    days = calendar.monthrange(year or 2000, month)[1]
    if not 1 <= day <= days:
        return f"{calendar.month_name[month]} {year:04d} has {days} days, not {day}"
    if hour > 23:
        return f"hour {hour} is past 23 (midnight is 00:00 of the next day)"
    if minute > 59:
        return f"minute {minute} is past 59"
    if second > 60:
        return f"second {second} is past 60 (a leap second)"
    return None


def _within_utc(value: datetime) -> datetime:
    """`value` in UTC; a time past the first or last day UTC holds here (the first day with
    a positive offset, the last with a negative one) is that first or last moment: a bound
    no stored time lies beyond."""
    try:
        return as_utc(value)
    except ValueError:
        return FIRST_MOMENT if value.year == datetime.min.year else LAST_MOMENT


UTCTime = Annotated[
    datetime,
    BeforeValidator(_date_time_text),
    AfterValidator(_within_utc),
    # Not `format: date-time`, which wants the seconds and the offset the server never did.
    WithJsonSchema(
        {
            "type": "string",
            "pattern": TIME_PATTERN,
            "description": "An RFC 3339 date-time; its seconds and offset may be left out "
            "(no offset: UTC).",
        }
    ),
]


def duration(seconds: int) -> str:
    """A span in words: 86400 → "24h", 7200 → "2h", 5400 → "90m", 45 → "45s"."""
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
