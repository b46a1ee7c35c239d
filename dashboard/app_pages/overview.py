"""Overview: every task in one table, trouble on top — stage, flag, edge share, agreement
with its interval, the worst bucket, degrade and offload failures, savings per day, open
alerts, the last decision in its sentence and the grade's tier with why — refreshed every
few seconds. Below: the alerts not yet resolved (admin: acknowledge) and the kill switch
(admin: throw or lift, with a reason and a confirmation) with its decisions."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from controlplane.alerts.actions import acknowledge
from controlplane.db import get_engine, session_scope
from controlplane.rollout.actions import REASON_MAX_CHARS, kill, lift
from controlplane.rollout.overview import Overview, TaskRow, overview
from dashboard import common
from dashboard.formats import count, decimal, interval, line, moment, money, percent
from dashboard.task.grading import NOT_GRADED, tier_line

NOTICE = "overview_notice"


@st.cache_data(ttl=common.TTL_SECONDS, show_spinner=False)
def load(url: str) -> Overview:
    with session_scope(get_engine(url)) as session:
        return overview(session)


def done(message: str) -> None:
    """After an action: forget cached reads, say what happened (Markdown, any untrusted
    text in it escaped), show the page again."""
    st.cache_data.clear()
    st.session_state[NOTICE] = message
    st.rerun()


def flag_text(row: TaskRow) -> str:
    if row.flag_version is None:
        return "no flag"
    return f"v{row.flag_version} (edge {row.edge_percent}%{', killed' if row.killed else ''})"


def worst_text(row: TaskRow) -> str:
    if row.worst_bucket is None:
        return "—"
    return (
        f"{row.worst_bucket}: {percent(row.worst_agreement)} "
        f"(low {percent(row.worst_agreement_low)})"
    )


def grade_text(row: TaskRow) -> str:
    """The tier and score of the task's newest grade, for the table."""
    if row.grade is None:
        return NOT_GRADED
    score = row.grade.get("score")
    return row.grade["tier"] + ("" if score is None else f" ({decimal(score)})")


def table(rows: list[TaskRow]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "task": row.task,
                "stage": row.stage,
                "grade": grade_text(row),
                "flag": flag_text(row),
                "edge share": percent(row.edge_share),
                "agreement": percent(row.agreement),
                "interval": interval(row.agreement_low, row.agreement_high),
                "worst bucket": worst_text(row),
                "degrade": percent(row.degrade_rate),
                "offload failures": percent(row.offload_fail_rate),
                "net savings/day": money(row.net_savings_per_day),
                "open alerts": row.open_alerts,
                "trouble": "; ".join(row.trouble) or "—",
                "last decision": row.last_decision_sentence or "—",
            }
            for row in rows
        ]
    )


def task_lines(row: TaskRow, task_page: st.Page) -> None:
    """The row as text too (a table draws on a canvas; people and browsers read text).
    Names, buckets, reasons and errors come from task configs and people: escaped."""
    st.markdown(
        f"**{line(row.task)}** — {row.stage} · flag {flag_text(row)} · "
        f"edge share {percent(row.edge_share)} · "
        f"agreement {percent(row.agreement)} ({interval(row.agreement_low, row.agreement_high)})"
        f" · worst bucket {line(worst_text(row))} · degrade {percent(row.degrade_rate)} · "
        f"offload failures {percent(row.offload_fail_rate)} · "
        f"net savings/day {money(row.net_savings_per_day)} · open alerts {row.open_alerts}"
    )
    st.markdown(tier_line(row.grade))
    notes = []
    if row.trouble:
        notes.append("Trouble: " + line("; ".join(row.trouble)) + ".")
    if row.config_error:
        notes.append(f"Its stored config cannot be read: {line(row.config_error)}.")
    elif row.window_start is None:
        notes.append("No closed window yet: figures appear once its first window closes.")
    else:
        notes.append(f"Latest closed window from {moment(row.window_start)}.")
    if row.last_decision:
        d = row.last_decision
        notes.append(
            f"Last decision ({line(d['action'])} by {line(d['actor'])}, "
            f"{moment(d['created_at'])}): {line(d['reason'])}"
        )
    else:
        notes.append("No decision yet.")
    st.caption(" ".join(notes))
    st.page_link(
        task_page, label=f"Evidence of {line(row.task)} →", query_params={"task": row.task}
    )


def tasks_section(view: Overview) -> None:
    if not view.rows:
        st.info(
            "No tasks yet. Register one with `shadowplane tasks apply -f FILE` (a task config "
            "in YAML or JSON), or POST it to /v1/tasks with an admin key; it shows here with "
            "its stage and flag, and its figures once its first window closes."
        )
        return
    trouble = view.in_trouble
    cols = st.columns(4)
    cols[0].metric("Tasks", len(view.rows))
    cols[1].metric("In trouble", len(trouble))
    cols[2].metric("Open alerts", sum(row.open_alerts for row in view.rows))
    cols[3].metric("Kill switch", "on" if view.killed else "off")
    if trouble:
        st.markdown(
            "In trouble: "
            + ", ".join(f"**{line(row.task)}** ({line('; '.join(row.trouble))})" for row in trouble)
        )
    else:
        st.markdown("No task is in trouble.")
    st.dataframe(table(view.rows), hide_index=True, width="stretch")
    # One page object for every link: a link given as a file path makes Streamlit resolve
    # the path and search every page for it, on each call.
    task_page = st.Page("app_pages/task.py", title="Task", url_path="task")
    for row in view.rows:
        task_lines(row, task_page)


def alerts_section(view: Overview, actor: str | None) -> None:
    """`actor`: who acknowledges (an admin's key name); None: a key that may not."""
    st.subheader("Open alerts")
    if not view.alerts:
        st.caption("No open alerts.")
        return
    for alert in view.alerts:
        seen = (
            f" — acknowledged by {line(alert['acknowledged_by'])}"
            if alert["state"] == "acknowledged"
            else ""
        )
        st.markdown(
            f"**{line(alert['task'])}** · {line(alert['kind'])} · "
            f"opened {moment(alert['opened_at'])}: {line(alert['message'])}{seen}"
        )
        if actor is not None and alert["state"] == "open":
            if st.button("Acknowledge", key=f"ack_{alert['id']}"):
                found = common.act(acknowledge, alert["id"], actor=actor)
                if found:
                    done(ack_notice(found, actor))


def ack_notice(alert: dict[str, Any], actor: str) -> str:
    """What acknowledging did: the action answers an alert that was no longer open (it
    resolved, or someone acknowledged it, since the page was drawn) as it is, unchanged."""
    what = f"Alert {alert['id']} ({line(alert['kind'])} on {line(alert['task'])})"
    if alert["state"] == "resolved":
        return (
            f"{what} had already resolved ({moment(alert['resolved_at'])}): nothing was recorded."
        )
    if alert["acknowledged_by"] != actor:
        return (
            f"{what} had already been acknowledged by {line(alert['acknowledged_by'])}: "
            "nothing was recorded."
        )
    return f"{what} acknowledged."


def switch_form(killed: bool, actor: str) -> None:
    """Throw or lift the kill switch: a reason and an explicit confirmation, or nothing."""
    if killed:
        name, label, confirm_text = (
            "lift",
            "Lift the kill switch",
            "I understand every task goes back to its stage's routing",
        )
    else:
        name, label, confirm_text = (
            "kill",
            "Throw the kill switch",
            "I understand every task goes to the cloud",
        )
    with st.form(f"{name}_form", clear_on_submit=True):
        # No max_chars: Streamlit would cut a longer value to it silently and the cut reason
        # would be recorded; the action refuses it instead, and its sentence shows.
        reason = st.text_input(
            "Reason", key=f"{name}_reason", help=f"At most {count(REASON_MAX_CHARS)} characters."
        )
        confirmed = st.checkbox(confirm_text, key=f"{name}_confirm")
        submitted = st.form_submit_button(label, key=f"{name}_submit", type="primary")
    if not submitted:
        return
    if not confirmed:
        st.warning(f"Nothing was done: tick “{confirm_text}” to confirm.")
        return
    if not reason.strip():
        st.warning("Nothing was done: say why in Reason (it is kept in the decision).")
        return
    action = lift if killed else kill
    if common.act(action, actor=actor, reason=reason.strip()):
        done(
            "Kill switch lifted." if killed else "Kill switch thrown: every task goes to the cloud."
        )


def switch_section(view: Overview, actor: str | None) -> None:
    st.subheader("Kill switch")
    if view.killed:
        st.markdown(
            "The kill switch is **on**: every task is served by the cloud. "
            f"Reason: {line(view.kill_reason)}"
        )
    else:
        st.markdown("The kill switch is off: each task is routed by its stage.")
    if view.switch_decisions:
        for d in view.switch_decisions:
            st.markdown(
                f"- {moment(d['created_at'])} — **{line(d['action'])}** by {line(d['actor'])}: "
                f"{line(d['reason'])}"
            )
    else:
        st.caption("It has never been thrown.")
    if actor is not None:
        switch_form(view.killed, actor)


principal = common.require("read")
# Only an admin acts here; everyone else reads.
acting = common.actor(principal) if common.can(principal, "admin") else None
st.title("Overview")


@st.fragment(run_every=common.TTL_SECONDS)
def live() -> None:
    # A fragment's own reruns (the refresh, its buttons) run outside the page's wrapper.
    with common.readable_errors():
        notice = st.session_state.pop(NOTICE, None)
        if notice:
            st.success(notice)
        view = load(common.database_url())
        if view.killed:
            st.error(
                "Kill switch on: every task is served by the cloud. "
                f"Reason: {line(view.kill_reason)}"
            )
        tasks_section(view)
        alerts_section(view, acting)
        switch_section(view, acting)


live()
