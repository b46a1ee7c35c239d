"""Overview: every task on one row, trouble on top — stage, grade tier, edge share and
agreement (with its worst bucket) each with its last 24 hours drawn small, net savings per
day, open alerts and the last decision; a quiet task says since when it has had no
traffic and keeps its last figures; admins roll a task back from its row (a reason and a
confirmation). Refreshed every few seconds. Below: the alerts not yet resolved (admin:
acknowledge) and the kill switch (admin: throw or lift, with a reason and a confirmation)
with its decisions. A task's sentences and charts are on its Task page, which its name
links to."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import streamlit as st

from controlplane.alerts.actions import acknowledge
from controlplane.auth.service import Principal
from controlplane.db import get_engine, session_scope
from controlplane.rollout.actions import REASON_MAX_CHARS, kill, left_on_the_cloud, lift
from controlplane.rollout.overview import Overview, TaskRow, overview
from shadowplane_dashboard import common
from shadowplane_dashboard.formats import count, line, moment, money, percent, text
from shadowplane_dashboard.overview import (
    COLUMN_GAP,
    COLUMNS,
    grade_text,
    kept_whole,
    may_roll_back,
    stage_text,
    standing,
    to_the_second,
    trend,
    unconfirmed,
    when,
)
from shadowplane_dashboard.task import actions as task_actions
from shadowplane_dashboard.task.grading import tier_line

NOTICE = "overview_notice"
# A task's name may be 100 characters without a space: its link wraps in its cell (a page
# link's label is kept on one line and cut where the cell ends otherwise).
TABLE_STYLE = """<style>
.st-key-overview_table [data-testid="stPageLink-NavLink"] span,
.st-key-overview_table [data-testid="stPageLink-NavLink"] p {
  white-space: normal;
  overflow-wrap: anywhere;
}
</style>"""


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


def figure(value: str, drawn: str, note: str = "") -> None:
    """A figure in bold, a note (Markdown), its sparkline under them: the SVG is this
    module's own text, and no other HTML can reach the cell (`note` is escaped)."""
    body = f"**{value}**" + (f" · {note}" if note else "") + (f"\n\n{drawn}" if drawn else "")
    st.markdown(body, unsafe_allow_html=bool(drawn))


def rollback_form(row: TaskRow, principal: Principal) -> None:
    """Roll the task back to the cloud: a reason and an explicit confirmation, or nothing;
    through the Task page's action (shadowplane_dashboard.task.actions.apply)."""
    confirm_text = f"I understand {row.task} goes to the cloud"
    with st.form(f"rollback_{row.task}", clear_on_submit=True, border=False):
        st.markdown(
            f"Roll **{line(row.task)}** back: the cloud serves all of its traffic until it is "
            "re-armed (its Task page)."
        )
        reason = st.text_input(
            "Reason",
            key=f"rollback_reason_{row.task}",
            help=f"At most {count(REASON_MAX_CHARS)} characters, on the decision and the "
            "audit log.",
        )
        confirmed = st.checkbox(text(confirm_text), key=f"rollback_confirm_{row.task}")
        submitted = st.form_submit_button(
            "Roll back to the cloud", key=f"rollback_submit_{row.task}", type="primary"
        )
    if not submitted:
        return
    refused = unconfirmed(reason, confirmed, confirm_text)
    if refused:
        st.warning(text(refused))
        return
    pending = {"kind": "rollback", "task": row.task, "expected_stage": row.stage}
    found = task_actions.apply(pending, principal, reason.strip())
    if found is not None:
        done(text(f"Done: {task_actions.done_text(pending, found)}"))


def task_row(
    row: TaskRow, task_page: st.Page, widths: list[int], admin: Principal | None, now: datetime
) -> None:
    """One task's row: every figure in a few words; its sentences are on its Task page."""
    cells = st.columns(widths, gap=COLUMN_GAP, vertical_alignment="top")
    with cells[0]:
        st.page_link(task_page, label=line(row.task), query_params={"task": row.task})
        said = standing(row, now)
        if said:
            # HTML of this module's own words (escaped), so a date is not broken.
            st.caption(kept_whole(said), unsafe_allow_html=True)
    cells[1].markdown(line(stage_text(row)))
    cells[2].markdown(line(grade_text(row)), help=tier_line(row.grade))
    with cells[3]:
        figure(percent(row.edge_share), trend(row, "edge_share"))
    with cells[4]:
        worst = (
            ""
            if row.worst_bucket is None
            else f"worst {line(row.worst_bucket)} {percent(row.worst_agreement)}"
        )
        figure(percent(row.agreement), trend(row, "agreement"), worst)
    cells[5].markdown(money(row.net_savings_per_day))
    cells[6].markdown(count(row.open_alerts))
    decision = row.last_decision
    if decision is None:
        cells[7].markdown("—")
    else:
        cells[7].markdown(
            f"{line(decision['action'])} by {line(decision['actor'])}  \n"
            f"{when(decision['created_at'], now, seconds=to_the_second(row))}",
            help=text(decision["reason"]),
        )
    if admin is not None:
        disabled = not may_roll_back(row)
        with cells[7].popover("Roll back", disabled=disabled, use_container_width=True):
            rollback_form(row, admin)


def tasks_section(view: Overview, admin: Principal | None) -> None:
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
    widths = [width for _, width in COLUMNS.values()]
    now = datetime.now(UTC)
    # One page object for every link: a link given as a file path makes Streamlit resolve
    # the path and search every page for it, on each call.
    task_page = st.Page("app_pages/task.py", title="Task", url_path="task")
    st.html(TABLE_STYLE)
    with st.container(key="overview_table"):
        headers = st.columns(widths, gap=COLUMN_GAP)
        for cell, (header, _) in zip(headers, COLUMNS.values(), strict=True):
            cell.caption(f"**{header}**")
        for row in view.rows:
            task_row(row, task_page, widths, admin, now)


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
    refused = unconfirmed(reason, confirmed, confirm_text)
    if refused:
        st.warning(refused)
        return
    action = lift if killed else kill
    decision = common.act(action, actor=actor, reason=reason.strip())
    if decision:
        still = left_on_the_cloud(decision) if killed else None
        done(
            (text(f"Kill switch lifted; {still}.") if still else "Kill switch lifted.")
            if killed
            else "Kill switch thrown: every task goes to the cloud."
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


common.require("read")
st.title("Overview")


@common.fragment("read", run_every=common.TTL_SECONDS)
def live(principal: Principal) -> None:
    # Only an admin acts here; everyone else reads.
    admin = principal if common.can(principal, "admin") else None
    acting = common.actor(principal) if admin is not None else None
    notice = st.session_state.pop(NOTICE, None)
    if notice:
        st.success(notice)
    view = load(common.database_url())
    if view.killed:
        st.error(
            f"Kill switch on: every task is served by the cloud. Reason: {line(view.kill_reason)}"
        )
    tasks_section(view, admin)
    alerts_section(view, acting)
    switch_section(view, acting)


live()
