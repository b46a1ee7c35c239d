"""The Task page's reads: each a service call in its own session, cached briefly and keyed
by the database's address (so two databases in one process never share an answer)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pandas as pd
import streamlit as st

from controlplane.alerts.service import list_alerts
from controlplane.catalog.service import list_task_views, task_runtimes
from controlplane.catalog.versions import config_versions
from controlplane.db import get_engine, session_scope
from controlplane.ingest.examples import has_results, results_in
from controlplane.metrics.period import window_span
from controlplane.metrics.service import window_rows
from controlplane.metrics.whatif import reports_confidence, whatif
from controlplane.review.accuracy import list_windows
from controlplane.review.calibration import task_calibration
from controlplane.rollout.service import list_decisions
from controlplane.rollout.taskview import span_evidence, task_state
from shadowplane_dashboard import common
from shadowplane_dashboard.task import views

EXAMPLES_PER_WINDOW = 5
DECISIONS_SHOWN = 50


@st.cache_data(ttl=common.TTL_SECONDS, show_spinner=False)
def load_task_names(url: str) -> list[str]:
    with session_scope(get_engine(url)) as session:
        return views.rolled_back_first(list_task_views(session))


@st.cache_data(ttl=common.TTL_SECONDS, show_spinner=False)
def load_state(url: str, task: str) -> dict[str, Any] | None:
    with session_scope(get_engine(url)) as session:
        return task_state(session, task)


@st.cache_data(ttl=common.TTL_SECONDS, show_spinner=False)
def load_spans(url: str, task: str) -> dict[str, Any] | None:
    """What the cost and input-shift rules read, up to the task's newest closed window."""
    with session_scope(get_engine(url)) as session:
        return span_evidence(session, task)


@st.cache_data(ttl=common.TTL_SECONDS, show_spinner=False)
def load_config(url: str, task: str) -> dict[str, Any] | None:
    """The task's id and current config as data (None: unknown, or it does not parse)."""
    with session_scope(get_engine(url)) as session:
        runtime = task_runtimes(session, {task}).get(task)
        if runtime is None:
            return None
        return {"id": runtime.id, **runtime.config.model_dump(mode="json")}


@st.cache_data(ttl=common.TTL_SECONDS, show_spinner=False)
def load_decisions(url: str, task: str) -> list[dict[str, Any]]:
    with session_scope(get_engine(url)) as session:
        return list_decisions(session, task, limit=DECISIONS_SHOWN)


@st.cache_data(ttl=common.TTL_SECONDS, show_spinner=False)
def load_examples(
    url: str, task: str, since: dt.datetime, until: dt.datetime, bucket: str, boundaries: tuple
) -> list[dict[str, Any]]:
    with session_scope(get_engine(url)) as session:
        return results_in(
            session,
            task,
            since=since,
            until=until,
            bucket=bucket,
            boundaries=boundaries,
            limit=EXAMPLES_PER_WINDOW,
        )


@st.cache_data(ttl=common.TTL_SECONDS, show_spinner=False)
def load_span(url: str, task_id: int) -> tuple[dt.datetime, dt.datetime] | None:
    with session_scope(get_engine(url)) as session:
        return window_span(session, task_id)


@st.cache_data(ttl=common.TTL_SECONDS, show_spinner=False)
def load_windows(url: str, task: str, since: dt.datetime, until: dt.datetime) -> pd.DataFrame:
    with session_scope(get_engine(url)) as session:
        runtime = task_runtimes(session, {task}).get(task)
        if runtime is None:
            return pd.DataFrame()
        rows = window_rows(session, runtime, since=since, until=until, limit=200_000)
    return pd.DataFrame(rows)


@st.cache_data(ttl=common.TTL_SECONDS, show_spinner=False)
def load_accuracy(url: str, task_id: int) -> list[dict[str, Any]]:
    with session_scope(get_engine(url)) as session:
        return list_windows(session, task_id, 500)


@st.cache_data(ttl=common.TTL_SECONDS, show_spinner=False)
def load_calibration(url: str, task_id: int) -> list[dict[str, Any]]:
    with session_scope(get_engine(url)) as session:
        return task_calibration(session, task_id)


@st.cache_data(ttl=common.TTL_SECONDS, show_spinner=False)
def load_alerts(url: str, task: str) -> list[dict[str, Any]]:
    with session_scope(get_engine(url)) as session:
        return list_alerts(session, task=task, limit=200)


@st.cache_data(ttl=common.TTL_SECONDS, show_spinner=False)
def load_whatif(
    url: str,
    task: str,
    since: dt.datetime,
    until: dt.datetime,
    max_input_tokens: int | None,
    min_confidence: float | None,
) -> dict[str, Any] | None:
    with session_scope(get_engine(url)) as session:
        runtime = task_runtimes(session, {task}).get(task)
        if runtime is None:
            return None
        return whatif(
            session,
            runtime,
            since=since,
            until=until,
            max_input_tokens=max_input_tokens,
            min_confidence=min_confidence,
        )


@st.cache_data(ttl=common.TTL_SECONDS, show_spinner=False)
def load_has_results(url: str, task: str, since: dt.datetime, until: dt.datetime) -> bool:
    with session_scope(get_engine(url)) as session:
        return has_results(session, task, since=since, until=until)


@st.cache_data(ttl=common.TTL_SECONDS, show_spinner=False)
def load_reports_confidence(url: str, task_id: int, since: dt.datetime, until: dt.datetime) -> bool:
    with session_scope(get_engine(url)) as session:
        return reports_confidence(session, task_id, since, until)


@st.cache_data(ttl=common.TTL_SECONDS, show_spinner=False)
def load_versions(url: str, task: str) -> list[dict[str, Any]]:
    with session_scope(get_engine(url)) as session:
        return config_versions(session, task) or []
