"""shadowplane_dashboard.formats: every number and time the dashboard writes, without a render."""

from __future__ import annotations

import ast
import math
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pandas as pd
import pytest

from shadowplane_dashboard import formats

DASHBOARD = Path(formats.__file__).parent


@pytest.mark.parametrize("gap", [None, math.nan, pd.NA, pd.NaT])
def test_a_gap_reads_as_a_dash(gap: object) -> None:
    assert formats.missing(gap)
    assert formats.percent(gap) == formats.change(gap) == formats.money(gap) == "—"  # type: ignore[arg-type]
    assert formats.interval(gap, 0.5) == formats.interval(0.5, gap) == "—"  # type: ignore[arg-type]


def test_zero_is_a_figure() -> None:
    assert not formats.missing(0) and not formats.missing(0.0)
    assert formats.percent(0.0) == "0.0%"
    assert formats.money(0.0) == "0.000000"


def test_rates_and_intervals() -> None:
    assert formats.percent(0.943) == "94.3%"
    assert formats.change(0.025) == "+2.5%" and formats.change(-0.004) == "-0.4%"
    assert formats.interval(0.91, 0.964) == "91.0%–96.4%"
    assert formats.estimate(0.943, 0.91, 0.964) == "94.3% (91.0%–96.4%)"
    assert formats.estimate(0.943, None, 0.964) == "94.3%"
    assert formats.estimate(None, None, None) == "—"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (-40.567, "-40.57"),
        (1234.5, "1,234.50"),
        (1.0, "1.00"),
        (0.00042, "0.000420"),
        (-0.5, "-0.500000"),
    ],
)
def test_money_keeps_small_sums_readable(value: float, shown: str) -> None:
    assert formats.money(value) == shown


def test_times_are_written_in_utc() -> None:
    at = datetime(2026, 11, 30, 2, 57, 31, tzinfo=UTC)
    assert formats.moment(at) == "2026-11-30 02:57 UTC"
    # Another zone, a naive value (stored as UTC) and ISO text are the same moment.
    assert formats.moment(at.astimezone(timezone(timedelta(hours=2)))) == "2026-11-30 02:57 UTC"
    assert formats.moment(at.replace(tzinfo=None)) == "2026-11-30 02:57 UTC"
    assert formats.moment("2026-11-30T02:57:31+00:00") == "2026-11-30 02:57 UTC"
    assert formats.moment(pd.Timestamp(at)) == "2026-11-30 02:57 UTC"
    assert formats.moment(None) == formats.moment(pd.NaT) == "—"
    assert formats.clock("2026-11-30T03:00:00+01:00") == "02:00"
    # 24-hour: an evening reads 20:29, never 08:29 or 08 PM.
    evening = datetime(2026, 11, 30, 20, 29, 10, tzinfo=UTC)
    assert formats.moment(evening) == "2026-11-30 20:29 UTC"
    assert formats.moment(evening, seconds=True) == "2026-11-30 20:29:10 UTC"
    assert formats.clock(evening) == "20:29" and formats.clock(evening, seconds=True) == "20:29:10"


@pytest.mark.parametrize(
    ("start", "end", "shown"),
    [
        # Windows of whole minutes: to the minute, "UTC" once at the end.
        ("2026-11-30T02:55:00", "2026-11-30T03:00:00", "2026-11-30 02:55 – 03:00 UTC"),
        # Ten-second windows: the seconds tell them apart (to the minute both read 20:29).
        ("2026-11-30T20:29:10", "2026-11-30T20:29:20", "2026-11-30 20:29:10 – 20:29:20 UTC"),
        ("2026-11-30T20:29:50", "2026-11-30T20:30:00", "2026-11-30 20:29:50 – 20:30:00 UTC"),
        # A window closing the day ends at 00:00; a longer span names its last day.
        ("2026-11-30T23:55:00", "2026-12-01T00:00:00", "2026-11-30 23:55 – 00:00 UTC"),
        ("2026-11-30T00:00:00", "2026-12-01T00:00:00", "2026-11-30 00:00 – 2026-12-01 00:00 UTC"),
        ("2026-11-30T23:50:00", "2026-12-01T00:10:00", "2026-11-30 23:50 – 2026-12-01 00:10 UTC"),
    ],
)
def test_a_span_reads_its_date_once_and_seconds_when_it_has_any(
    start: str, end: str, shown: str
) -> None:
    assert formats.span(start, end) == shown


def test_seconds_are_shown_for_windows_that_are_not_whole_minutes() -> None:
    assert formats.seconds_shown(10) and formats.seconds_shown(90)
    assert not formats.seconds_shown(60) and not formats.seconds_shown(300)
    at = datetime(2026, 11, 30, 2, 55, tzinfo=UTC)
    assert formats.span(at, at + timedelta(minutes=5), seconds=True) == (
        "2026-11-30 02:55:00 – 03:00:00 UTC"
    )


def test_untrusted_text_is_literal() -> None:
    assert formats.text("[x](y) *b*") == r"\[x\]\(y\) \*b\*"
    assert formats.text("a\n  b") == "a  \n\u00a0\u00a0b"
    assert formats.line("a\n  b") == "a b"


@pytest.mark.parametrize(
    ("value", "shown"),
    [(4e-07, "< 0.000001"), (-4e-07, "> -0.000001"), (1e-06, "0.000001"), (-0.0, "0.000000")],
)
def test_money_never_writes_a_tiny_amount_as_zero(value: float, shown: str) -> None:
    assert formats.money(value) == shown


def test_a_change_that_rounds_to_nothing_has_no_sign() -> None:
    assert formats.change(-1e-05) == formats.change(1e-05) == formats.change(0.0) == "0.0%"
    assert formats.decimal(-0.001, signed=True) == formats.coefficient(-0.001) == "0.00"


def test_figures_and_counts() -> None:
    assert formats.level(0.95) == "95%"
    assert formats.decimal(1.234, signed=True) == "+1.23"
    assert formats.decimal(-0.4, signed=True) == "-0.40"
    assert formats.decimal(5.5) == "5.50"
    assert formats.decimal(None) == "—"
    assert formats.coefficient(0.812) == "0.81"
    assert formats.number(12.0) == "12" and formats.number(0.15) == "0.15"
    assert formats.count(1200) == "1,200"


def test_chart_directives() -> None:
    assert formats.axis_format(True) == ".1~%" and formats.axis_format(False) == ",.3~r"
    assert formats.tooltip_format(True) == ".1%" and formats.tooltip_format(False) == ",.4g"
    assert formats.tooltip_format(True, fine=True) == ".2%"
    assert formats.tooltip_format(False, fine=True) == ",.6g"
    # A chart's times: the directives Python writes the page's text with.
    at = datetime(2026, 11, 30, 20, 29, 10, tzinfo=UTC)
    for seconds in (False, True):
        assert f"{at:{formats.time_tooltip(seconds=seconds)}}" == formats.moment(
            at, seconds=seconds
        )
    # The axis reads UTC alone, in 24 hours: no local time, no AM/PM.
    label = formats.TIME_AXIS_LABEL
    assert "utcFormat" in label and "timeFormat" not in label and "%I" not in label
    assert "%p" not in label


def _formatting(path: Path) -> list[str]:
    """Where a module writes a figure itself: a format spec in an f-string, or a call of
    `format`, `strftime`, `isoformat` or `round`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FormattedValue) and node.format_spec is not None:
            found.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
        elif isinstance(node, ast.Call):
            name = getattr(node.func, "attr", getattr(node.func, "id", None))
            if name in {"format", "strftime", "isoformat", "round"}:
                found.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
    return found


def test_formats_is_the_only_formatter_in_the_dashboard() -> None:
    modules = [p for p in DASHBOARD.rglob("*.py") if p != DASHBOARD / "formats.py"]
    assert modules
    assert [where for p in modules for where in _formatting(p)] == []
