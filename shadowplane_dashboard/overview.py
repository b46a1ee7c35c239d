"""What the Overview writes in a task's row, as plain functions of its TaskRow (the page
draws them; tests read them): its columns, times, the quiet task's sentence, the grade,
the sparklines, and when an action with a reason and a confirmation may run."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from html import escape
from typing import Final

from controlplane.rollout.overview import TaskRow
from shadowplane_dashboard.formats import clock, decimal, moment, percent, seconds_shown, span
from shadowplane_dashboard.sparklines import sparkline
from shadowplane_dashboard.task import views
from shadowplane_dashboard.task.grading import NOT_GRADED

# The table's columns: their headers and relative widths, the least each needs to read
# whole in the 750 pixels left at a 1280-pixel window (its longest words and names,
# "insufficient", "ticket_classify", on one line; an admin's Roll back under the last
# decision). No-break spaces keep "24 h" on one line.
COLUMNS = {
    "task": ("task", 115),
    "stage": ("stage", 70),
    "grade": ("grade", 95),
    "edge_share": ("edge share, 24\u00a0h", 85),
    "agreement": ("agreement, worst bucket, 24\u00a0h", 130),
    "net_savings": ("net savings / day", 80),
    "open_alerts": ("open alerts", 55),
    "last_decision": ("last decision", 115),
}
# The room between two columns (Streamlit's default is 1rem).
COLUMN_GAP: Final = "xsmall"


def when(value: datetime | str, now: datetime, *, seconds: bool = False) -> str:
    """A time of today (UTC) as its clock ("20:33 UTC"), an older one with its date; to
    the second when `seconds`. A naive time is UTC already (as stored)."""
    at = datetime.fromisoformat(value) if isinstance(value, str) else value
    day = at.date() if at.tzinfo is None else at.astimezone(UTC).date()
    if day == now.astimezone(UTC).date():
        return f"{clock(at, seconds=seconds)} UTC"
    return moment(at, seconds=seconds)


def to_the_second(row: TaskRow) -> bool:
    """Whether the row's times are written to the second: its windows are (shorter than a
    minute, or of minutes and seconds), as everywhere on the dashboard."""
    if row.window_start is None or row.window_end is None:
        return False
    return seconds_shown((row.window_end - row.window_start).total_seconds())


def unconfirmed(reason: str, confirmed: bool, confirm_text: str) -> str | None:
    """Why an action with a reason and a confirmation does nothing; None when it may run."""
    if not confirmed:
        return f"Nothing was done: tick “{confirm_text}” to confirm."
    if not reason.strip():
        return "Nothing was done: say why in Reason (it is kept in the decision)."
    return None


def stage_text(row: TaskRow) -> str:
    """The stage in words, a canary with the share its flag sends to the edge, and whether
    the kill switch holds it ("canary 10% · killed")."""
    words = row.stage.replace("_", " ")
    if row.stage == "canary" and row.edge_percent is not None:
        words += f" {row.edge_percent}%"
    return words + (" · killed" if row.killed else "")


def grade_text(row: TaskRow) -> str:
    """The tier and score of the task's newest grade, for the table."""
    if row.grade is None:
        return NOT_GRADED
    score = row.grade.get("score")
    return row.grade["tier"] + ("" if score is None else f" ({decimal(score)})")


def standing(row: TaskRow, now: datetime) -> str | None:
    """Under the task's name: why its figures are old or missing (None: they are fresh)."""
    if row.config_error:
        return "its stored config cannot be read"
    if row.window_start is None:
        return "no closed window with results yet"
    if row.quiet_since is not None:
        return f"no traffic since {when(row.quiet_since, now, seconds=to_the_second(row))}"
    return None


# A date as the row writes it: a browser may break a line after either of its hyphens.
DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def kept_whole(words: str) -> str:
    """`words` (plain text) as HTML whose dates stay on one line, the line broken at its
    spaces only: the narrow task column would set "2026-11-" on one line and "30" on
    the next."""
    return DATE.sub(
        lambda m: f'<span style="white-space:nowrap">{m[0]}</span>', escape(words, quote=False)
    )


def trend(row: TaskRow, name: str) -> str:
    """A sparkline of the task's `name` rate (agreement or edge_share) over the span it has
    results in, in its last 24 hours."""
    values = [(p.start, getattr(p, name)) for p in row.series]
    known = [v for _, v in values if v is not None]
    if not known or row.window_end is None:
        return ""
    words = name.replace("_", " ")
    drawn = span(values[0][0], row.window_end, seconds=to_the_second(row))
    label = (
        f"{words} over {drawn}: "
        f"{percent(min(known))} to {percent(max(known))}, last {percent(known[-1])}"
    )
    return sparkline(values, name=name, label=label)


def may_roll_back(row: TaskRow) -> bool:
    """Whether the task's stage may be rolled back (as the Task page's button decides)."""
    moves = views.moves({"stage": row.stage, "stage_words": row.stage})
    return not next(disabled for kind, _, disabled in moves if kind == "rollback")
