"""How the dashboard writes numbers and text: one place, so a page and its tests agree.

Anything not written by the dashboard itself (task and model names, reasons, notes,
payloads, ids from uploaded files, error details) goes into Markdown through `text()`,
so it is shown as written: never as a link, an image, a colour, maths or code."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

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
# A time to the minute and to the second: Python's strftime and Vega's (d3's) time formats
# read the same directives, so the page's text and its charts' tooltips agree.
MINUTE = "%Y-%m-%d %H:%M"
SECOND = "%Y-%m-%d %H:%M:%S"


def seconds_shown(window_seconds: float) -> bool:
    """Whether times about windows this long are written to the second: windows shorter
    than a minute, or of minutes and seconds (a 90 s window may start at :30)."""
    return window_seconds % 60 != 0


def axis_format(rate: bool) -> str:
    """A chart axis's d3-format directive (Vega draws it): a rate as a percentage, any
    other figure to three significant digits, trailing zeros trimmed."""
    return ".1~%" if rate else ",.3~r"


# A difference of two rates on an axis, signed ("+5%", "−2.5%").
DIFFERENCE_AXIS = "+.1~%"
# ... and in a tooltip, to one decimal of a percent.
DIFFERENCE_TOOLTIP = "+.1%"


def time_tooltip(*, seconds: bool) -> str:
    """A chart tooltip's time directive, read in UTC (`formatType="utc"`): the date and the
    24-hour time, to the second when `seconds`, and "UTC" ("2026-11-30 20:29:10 UTC")."""
    return f"{SECOND if seconds else MINUTE} UTC"


# A time axis's labels, as a Vega expression read in UTC: the date at midnight ("Nov 30"),
# else the 24-hour time, with its seconds when a tick has any ("20:29", "20:29:10"). Vega's
# own labels are the browser's local time, in 12 hours ("08 PM").
TIME_AXIS_LABEL = (
    "utchours(datum.value) + utcminutes(datum.value) + utcseconds(datum.value) == 0"
    " ? utcFormat(datum.value, '%b %d')"
    " : utcFormat(datum.value, utcseconds(datum.value) ? '%H:%M:%S' : '%H:%M')"
)


def tooltip_format(rate: bool, *, fine: bool = False) -> str:
    """A chart tooltip's d3-format directive: a rate to one decimal of a percent, any other
    figure to four significant digits; `fine` one more of each (a line without a band)."""
    if fine:
        return ".2%" if rate else ",.6g"
    return ".1%" if rate else ",.4g"


def missing(value: object) -> bool:
    """No figure to show: None, or the NaN, NaT or NA a pandas frame holds for a gap (the
    only values unequal to themselves; NA's comparison is NA, which has no truth value)."""
    if value is None:
        return True
    try:
        return bool(value != value)
    except TypeError:
        return True


def percent(value: float | None) -> str:
    """A rate as a percentage with one decimal ("94.3%"); "—" without data."""
    return NONE if missing(value) else f"{value:.1%}"


def _no_signed_zero(written: str) -> str:
    """A figure that rounded to zero without its sign ("-0.0%" reads "0.0%"): a sign on a
    shown zero claims a direction the figure does not have."""
    return written.lstrip("+-") if not any(c in "123456789" for c in written) else written


def change(value: float | None) -> str:
    """A difference of two rates, signed ("+2.5%", "-0.4%"); one that rounds to nothing
    reads "0.0%"; "—" without data."""
    return NONE if missing(value) else _no_signed_zero(f"{value:+.1%}")


def level(value: float) -> str:
    """A confidence level as a whole percentage ("95%")."""
    return f"{value:.0%}"


def decimal(value: float | None, *, signed: bool = False) -> str:
    """A figure to two decimals ("5.50"), with its sign when `signed` ("+1.23", "-0.40");
    "—" without data."""
    if value is None or missing(value):
        return NONE
    return _no_signed_zero(f"{value:+.2f}" if signed else f"{value:.2f}")


def coefficient(value: float | None) -> str:
    """A statistic between -1 and 1 (Krippendorff's alpha, Cohen's kappa) to two decimals."""
    return decimal(value)


def number(value: float) -> str:
    """A count or a setting as briefly as it reads ("12", "0.15", "2.5")."""
    return f"{value:g}"


def coordinate(value: float) -> float:
    """A drawing's coordinate to a tenth of its unit: enough for a crisp line, short text."""
    return round(value, 1)


def count(value: int) -> str:
    """A whole number with thousands separated ("1,200")."""
    return f"{value:,}"


def whole(value: float) -> str:
    """A measured quantity to the nearest whole, thousands separated ("1,448")."""
    return f"{value:,.0f}"


def interval(low: float | None, high: float | None) -> str:
    """A Wilson interval as "91.0%–96.4%"; "—" without data."""
    if missing(low) or missing(high):
        return NONE
    return f"{percent(low)}–{percent(high)}"


def estimate(value: float | None, low: float | None, high: float | None) -> str:
    """A rate with its interval when there is one ("94.3% (91.0%–96.4%)"), else the rate."""
    if missing(low) or missing(high):
        return percent(value)
    return f"{percent(value)} ({interval(low, high)})"


# The smallest amount `money` writes in figures; a non-zero one below it reads "< 0.000001".
SMALLEST_AMOUNT = 0.000001


def money(value: float | None) -> str:
    """An amount in the prices' unit with its sign: two decimals ("-40.57"), six below 1
    ("0.000420") so a window of cheap calls never reads 0.00, and a non-zero amount too
    small even for six "< 0.000001" (a saving) or "> -0.000001" (a loss); "—" without
    data."""
    if value is None or missing(value):
        return NONE
    if abs(value) >= 1:
        return f"{value:,.2f}"
    written = _no_signed_zero(f"{value:,.6f}")
    if value == 0 or written != "0.000000":
        return written
    return f"< {SMALLEST_AMOUNT:.6f}" if value > 0 else f"> -{SMALLEST_AMOUNT:.6f}"


def _utc(value: datetime | str) -> datetime:
    """An ISO text or a datetime in UTC; a naive one is taken as UTC already (as stored)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def moment(value: datetime | str | None, *, seconds: bool = False) -> str:
    """A time in UTC, 24-hour, to the minute ("2026-11-30 02:57 UTC"), to the second when
    `seconds` ("2026-11-30 02:57:31 UTC"); "—" without one."""
    if value is None or missing(value):
        return NONE
    return f"{_utc(value):{SECOND if seconds else MINUTE}} UTC"


def clock(value: datetime | str, *, seconds: bool = False) -> str:
    """The UTC time of day, 24-hour ("03:00"; "03:00:10" when `seconds`)."""
    return f"{_utc(value):{'%H:%M:%S' if seconds else '%H:%M'}}"


def span(start: datetime | str, end: datetime | str, *, seconds: bool | None = None) -> str:
    """A window or a period: its date, its start and end times, then "UTC"
    ("2026-11-30 02:55 – 03:00 UTC"). Seconds are shown when `seconds`, or (None) when
    either end has any ("2026-11-30 20:29:10 – 20:29:20 UTC"); the end's date too when it
    falls on a later day, unless it is the midnight closing a span shorter than a day
    ("2026-11-30 23:55 – 00:00 UTC")."""
    first, last = _utc(start), _utc(end)
    if seconds is None:
        seconds = bool(first.second or last.second)
    directive = SECOND if seconds else MINUTE
    to = clock(last, seconds=seconds)
    closes_the_day = last - first < timedelta(days=1) and to.strip(":0") == ""
    if last.date() != first.date() and not closes_the_day:
        to = f"{last:{directive}}"
    return f"{first:{directive}} – {to} UTC"
