"""How the Audit page shows the timeline (pure): a table that reads at a glance, each
event's time to the second in UTC and every text whole and as written, a page of events at
a time; the CSV download is the read model's own (`controlplane.rollout.timeline`)."""

from __future__ import annotations

import pandas as pd

from controlplane.rollout.timeline import Event
from shadowplane_dashboard.formats import moment, text

# The table shows this many events at a time (a wrapped table of a thousand rows is slow to
# draw); the CSV holds every event shown.
PAGE_EVENTS = 100


def table_rows(events: list[Event]) -> pd.DataFrame:
    """The events as the page's table shows them: the time in UTC to the second (events come
    seconds apart), every text whole and as written (the table reads its cells as Markdown,
    so task, actor, what and detail, written by people, keys and task authors, are
    escaped)."""
    return pd.DataFrame(
        {
            "time": [moment(e.at, seconds=True) for e in events],
            "kind": [e.kind for e in events],
            "task": [text(e.task or "every task") for e in events],
            "actor": [text(e.actor or "—") for e in events],
            "what": [text(e.what) for e in events],
            "detail": [text(e.detail) for e in events],
        }
    )


def page_label(page: int, total: int) -> str:
    """Which events a page of the table holds ("1–100 (newest)")."""
    first, last = page * PAGE_EVENTS + 1, min(total, (page + 1) * PAGE_EVENTS)
    return f"{first}–{last}" + (" (newest)" if page == 0 else "")


# The table's columns: the time and the kind on one line; task, actor and what wrap within
# a width, anywhere if need be (a key name has no spaces); the detail takes the most room
# and wraps anywhere too (a hash in the audit log's JSON). Streamlit's Markdown sets its own
# wrapping, hence !important.
TABLE_STYLE = """<style>
.st-key-audit_events td { vertical-align: top; }
.st-key-audit_events td:nth-child(-n+2) p { white-space: nowrap; }
.st-key-audit_events td:nth-child(n+3) p { overflow-wrap: anywhere !important; }
.st-key-audit_events td:nth-child(3) p { min-width: 6rem; max-width: 12rem; }
.st-key-audit_events td:nth-child(4) p { min-width: 6rem; max-width: 14rem; }
.st-key-audit_events td:nth-child(5) p { min-width: 5rem; max-width: 12rem; }
.st-key-audit_events td:nth-child(6) { width: 45%; }
.st-key-audit_events td:nth-child(6) p { min-width: 12rem; }
</style>"""
