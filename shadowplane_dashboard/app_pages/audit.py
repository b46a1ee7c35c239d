"""Audit: one timeline of flag changes, decisions, config versions and the audit log's
entries, newest first; filter by task, actor and days; read each event whole (its time to
the second, its actor and detail wrapped, never cut); download what is shown as CSV."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

import streamlit as st

from controlplane.catalog.service import list_task_views
from controlplane.db import get_engine, session_scope
from controlplane.rollout.timeline import KINDS, Event, Filters, actors, csv_text, timeline
from shadowplane_dashboard import common
from shadowplane_dashboard.auditing import PAGE_EVENTS, TABLE_STYLE, page_label, table_rows

EVERY = "(all)"
KIND_NAMES = {
    "flag": "flag changes",
    "decision": "decisions",
    "config": "config versions",
    "action": "audit log",
}
# The first day the filters offer (Streamlit's default is ten years back).
EARLIEST = date(2000, 1, 1)


@st.cache_data(ttl=common.TTL_SECONDS, show_spinner=False)
def load_choices(url: str) -> tuple[list[str], list[str]]:
    """The task names and the actors the filters offer."""
    with session_scope(get_engine(url)) as session:
        return [view["task"] for view in list_task_views(session)], actors(session)


@st.cache_data(ttl=common.TTL_SECONDS, show_spinner=False)
def load_events(url: str, filters: Filters) -> list[Event]:
    with session_scope(get_engine(url)) as session:
        return timeline(session, filters)


def day_start(day: date | None) -> datetime | None:
    return None if day is None else datetime.combine(day, time(), tzinfo=UTC)


principal = common.require("read")
st.title("Audit")
st.caption(
    "Flag changes, decisions, config versions and every change a person, a key or the "
    "policy made, newest first. Times are UTC."
)

url = common.database_url()
task_names, actor_names = load_choices(url)
left, middle, right, last = st.columns(4)
task = left.selectbox("Task", [EVERY, *task_names], key="audit_task")
actor = middle.selectbox("Actor", [EVERY, *actor_names], key="audit_actor")
since_day = right.date_input("From (UTC day)", value=None, min_value=EARLIEST, key="audit_since")
until_day = last.date_input(
    "To (UTC day, included)", value=None, min_value=EARLIEST, key="audit_until"
)

kinds = st.multiselect(
    "Show",
    list(KINDS),
    default=list(KINDS),
    format_func=KIND_NAMES.__getitem__,
    key="audit_kinds",
)

since = day_start(since_day) if isinstance(since_day, date) else None
until_start = day_start(until_day) if isinstance(until_day, date) else None
filters = Filters(
    task=None if task == EVERY else task,
    actor=None if actor == EVERY else actor,
    since=since,
    until=until_start + timedelta(days=1) if until_start else None,
    kinds=tuple(kind for kind in KINDS if kind in kinds),
)
events = load_events(url, filters)

if not events:
    if not task_names and not actor_names:
        st.info(
            "Nothing recorded yet. Register a task with `shadowplane tasks apply -f FILE` "
            "(or POST /v1/tasks); its config versions, flags and decisions appear here."
        )
    else:
        st.info("No event matches these filters. Choose (all), widen the days, or show more kinds.")
    st.stop()

st.markdown(f"{len(events)} event{'s' if len(events) != 1 else ''} shown, newest first.")
st.download_button(
    "Download CSV",
    data=csv_text(events),
    file_name="shadowplane-audit.csv",
    mime="text/csv",
    key="audit_csv",
)
page = 0
if len(events) > PAGE_EVENTS:
    pages = range((len(events) + PAGE_EVENTS - 1) // PAGE_EVENTS)
    page = st.selectbox(
        f"Events, {PAGE_EVENTS} at a time (the CSV holds all {len(events)})",
        pages,
        format_func=lambda p: page_label(p, len(events)),
        key="audit_page",
    )
st.html(TABLE_STYLE)
with st.container(key="audit_events"):
    shown = events[page * PAGE_EVENTS : (page + 1) * PAGE_EVENTS]
    st.table(table_rows(shown), hide_index=True)
