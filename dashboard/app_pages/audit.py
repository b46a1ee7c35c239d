"""Audit: one timeline of flag changes, decisions, config versions and the audit log's
entries, newest first; filter by task, actor and days; download what is shown as CSV."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

import pandas as pd
import streamlit as st

from controlplane.catalog.service import list_task_views
from controlplane.db import get_engine, session_scope
from controlplane.rollout.timeline import (
    COLUMNS,
    KINDS,
    Event,
    Filters,
    actors,
    csv_text,
    rows,
    timeline,
)
from dashboard import common
from dashboard.formats import line, moment

EVERY = "(all)"
# How many events the page also writes out as text under the table.
TEXT_EVENTS = 20
DETAIL_CHARS = 160
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


def event_line(event: Event) -> str:
    """One event as a line of Markdown; its task, actor, what and detail (written by people,
    keys and task authors) escaped."""
    detail = event.detail
    if len(detail) > DETAIL_CHARS:
        detail = detail[:DETAIL_CHARS] + "…"
    return (
        f"{moment(event.at)} · {event.kind} · {line(event.task or 'every task')} · "
        f"{line(event.actor or '—')} · **{line(event.what)}**: {line(detail)}"
    )


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
table = pd.DataFrame(rows(events), columns=list(COLUMNS))
table["task"] = table["task"].fillna("every task")
st.dataframe(table, hide_index=True, width="stretch")
st.subheader("Latest events")
for event in events[:TEXT_EVENTS]:
    st.markdown(event_line(event))
