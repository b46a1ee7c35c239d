"""Task: one task's evidence. Where it stands and why (the decisions in the policy's own
sentences, with their evidence and example results), the promotion gate, the metrics over
time per length bucket with the rules' thresholds, route accuracy and the comparator's
calibration, alerts, a routing what-if, and the config versions side by side. Admins
promote, roll back, re-arm and unblock here, each with a reason."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from controlplane.alerts.service import list_alerts
from controlplane.catalog.service import list_task_views, task_runtimes
from controlplane.catalog.versions import config_diff, config_versions
from controlplane.db import get_engine, session_scope
from controlplane.errors import ActionError
from controlplane.ingest.buckets import bucket_labels
from controlplane.ingest.examples import has_results, results_in
from controlplane.metrics.period import window_span
from controlplane.metrics.service import window_rows
from controlplane.metrics.whatif import whatif
from controlplane.review.accuracy import list_windows
from controlplane.review.calibration import task_calibration
from controlplane.rollout import actions
from controlplane.rollout.service import list_decisions
from controlplane.rollout.taskview import task_state
from controlplane.settings import Settings
from dashboard import charts, common, formats

alt.data_transformers.disable_max_rows()

PERIODS = {
    "the last 6 hours": dt.timedelta(hours=6),
    "the last 24 hours": dt.timedelta(hours=24),
    "the last 3 days": dt.timedelta(days=3),
    "the last 7 days": dt.timedelta(days=7),
}
# The what-if replays at most this long a period (as GET /v1/tasks/{task}/whatif).
WHATIF_MAX_DAYS = 31
# The what-if replays kept in the session (one per setting asked for), newest last.
WHATIF_KEPT = 5
# How much of an unknown `?task=` the page echoes.
ASKED_SHOWN = 100
EXAMPLES_PER_WINDOW = 5
DECISIONS_SHOWN = 50


# --- loaders: cached briefly, keyed by the database ------------------------------------


@st.cache_data(ttl=common.TTL_SECONDS, show_spinner=False)
def load_task_names(url: str) -> list[str]:
    with session_scope(get_engine(url)) as session:
        views = list_task_views(session)
    # Rolled-back tasks first: they are why someone opens this page at night.
    return [
        v["task"] for v in sorted(views, key=lambda v: (v["stage"] != "rolled_back", v["task"]))
    ]


@st.cache_data(ttl=common.TTL_SECONDS, show_spinner=False)
def load_state(url: str, task: str) -> dict[str, Any] | None:
    with session_scope(get_engine(url)) as session:
        return task_state(session, task)


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
def load_versions(url: str, task: str) -> list[dict[str, Any]]:
    with session_scope(get_engine(url)) as session:
        return config_versions(session, task) or []


# --- how numbers read ------------------------------------------------------------------


def when(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def clock(value: Any) -> str:
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    return value.astimezone(dt.UTC).strftime("%H:%M")


def missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def pct(value: float | None) -> str:
    return "—" if missing(value) else f"{value:.1%}"


def interval(low: float | None, high: float | None) -> str:
    return "" if missing(low) or missing(high) else f" ({low:.1%}–{high:.1%})"


def money(value: float | None) -> str:
    """Costs in the prices' currency: small sums (a window of cheap calls) keep six places."""
    if missing(value):
        return "—"
    assert value is not None
    return f"{value:,.2f}" if abs(value) >= 100 else f"{value:,.6f}"


def rule_threshold(config: dict[str, Any], metric: str) -> float | None:
    """The threshold of the first rule on `metric` that is not off."""
    for rule in config.get("rollback", {}).get("rules", []):
        if rule["metric"] == metric and rule.get("mode") != "off":
            return float(rule["threshold"])
    return None


# --- the page ----------------------------------------------------------------------------

principal = common.require("read")
url = common.database_url()
st.title("Task")

names = load_task_names(url)
if not names:
    st.info(
        "No tasks yet. Register one with `shadowplane tasks apply -f FILE` (or POST /v1/tasks with an admin key); "
        "its evidence shows here once its routers post results."
    )
    st.stop()

# `?task=` picks the task (links from other pages and alerts); a link followed within the
# session wins over the last pick, and the pick is written back so the address can be shared.
asked = st.query_params.get("task")
if asked and asked not in names:
    echo = asked if len(asked) <= ASKED_SHOWN else asked[:ASKED_SHOWN] + "…"
    st.warning(
        f"There is no task named {formats.line(repr(echo))}. "
        f"Pick one of the {len(names)} tasks below."
    )
# (The picker's own state is dropped while another page is shown: coming back through a
# link then takes the link's task too.)
if asked in names and (
    asked != st.session_state.get("task_linked") or "task_pick" not in st.session_state
):
    st.session_state["task_pick"] = asked
if st.session_state.get("task_pick") not in names:
    st.session_state["task_pick"] = names[0]
task = st.selectbox("Task", names, key="task_pick")
st.session_state["task_linked"] = task
st.query_params["task"] = task

state = load_state(url, task)
config = load_config(url, task)
if state is None:
    st.warning(
        f"The task {formats.line(repr(task))} is gone (deleted since the list was read). "
        "Pick another."
    )
    st.stop()

st.markdown(
    f"**{formats.line(task)}** is in **{formats.line(state['stage_words'])}** since {when(state['stage_changed_at'])}, "
    f"config version {state['config_version']}."
)
if config is None:
    st.error(
        f"The stored config version {state['config_version']} of {formats.line(task)} does "
        "not parse, so "
        "nothing is computed for it. Apply a valid config (`shadowplane tasks apply -f FILE`)."
    )
    st.stop()
task_config: dict[str, Any] = config
boundaries = tuple(task_config["length_buckets"])
buckets = bucket_labels(boundaries)
decisions = load_decisions(url, task)
versions = load_versions(url, task)
alerts = load_alerts(url, task)
if decisions:
    st.markdown(f"Last decision: {formats.text(decisions[0]['reason'])}")


# --- decisions ---------------------------------------------------------------------------

st.header("Decisions")
if not decisions:
    st.info(
        "No decisions yet. The policy writes one when a rollback rule fires (or the gate "
        "promotes with auto_promote); people's promotions, rollbacks and re-arms show here too."
    )
configs_by_version = {v["version"]: v["config"] for v in versions}


def evidence_windows(decision: dict[str, Any]) -> None:
    """The windows the rule judged: counts, estimate, bound, threshold, verdict."""
    evidence = decision.get("evidence") or {}
    windows = evidence.get("windows") or []
    level = evidence.get("confidence")
    bound = "bound" if level in (None, "point") else f"{level:.0%} bound"
    table = pd.DataFrame(
        [
            {
                "window": f"{when(w['window_start'])} – {clock(w['window_end'])}",
                "counts": f"{w['num']:g}/{w['den']:g}",
                "estimate": w["estimate"],
                bound: w["bound"],
                "threshold": w["threshold"],
                "verdict": w["verdict"],
            }
            for w in windows
        ]
    )
    st.dataframe(table, hide_index=True)
    st.markdown(
        "\n".join(
            f"- {when(w['window_start'])} – {clock(w['window_end'])}: {w['num']:g}/{w['den']:g} "
            f"= {pct(w['estimate'])}, {bound} {pct(w['bound'])}, threshold {w['threshold']:g}: "
            f"**{formats.line(w['verdict'])}**"
            for w in windows
        )
    )
    models_and_examples(decision, [w for w in windows if w["verdict"] == "breach"])


def cusum_evidence(decision: dict[str, Any]) -> None:
    """A CUSUM's run: per window its counts, its evidence (the log-likelihood ratio), what
    the cap let count of it and the running sum, which fired on reaching h."""
    evidence = decision.get("evidence") or {}
    steps = evidence.get("steps") or []
    cap = evidence.get("cap")
    table = pd.DataFrame(
        [
            {
                "window": f"{when(s['window_start'])} – {clock(s['window_end'])}",
                "counts": f"{s['num']:g}/{s['den']:g}",
                "estimate": s["estimate"],
                "evidence": s["contribution"],
                "counted": s["counted"],
                "sum": s["sum"],
            }
            for s in steps
        ]
    )
    st.dataframe(table, hide_index=True)
    if evidence.get("steps_omitted"):
        st.caption(
            f"The run began {evidence['steps_omitted']:,} windows before the first shown: "
            "the evidence keeps the latest windows of a long run."
        )
    capped = f"; each window counts at most {cap:g}" if cap is not None else ""
    st.caption(
        f"Evidence is the window's log-likelihood ratio: how much likelier its counts are "
        f"if the rate moved past the threshold by {evidence.get('min_effect', 0):g} than "
        f"if it sits at the threshold. The sum adds each window's evidence{capped}, never "
        f"goes below 0, and fires at h = {evidence.get('h', 0):g}."
    )
    st.markdown(
        "\n".join(
            f"- {when(s['window_start'])} – {clock(s['window_end'])}: {s['num']:g}/{s['den']:g}"
            f" = {pct(s['estimate'])}, evidence {s['contribution']:+.2f}, counted "
            f"{s['counted']:+.2f}, sum **{s['sum']:.2f}**"
            for s in steps
        )
    )
    models_and_examples(decision, [s for s in steps if s["counted"] > 0])


def models_and_examples(decision: dict[str, Any], bad: list[dict[str, Any]]) -> None:
    """The edge models the firing saw, and the example results of each bad window."""
    evidence = decision.get("evidence") or {}
    if evidence.get("models"):
        st.markdown(
            "Edge models seen in these windows (blocked from auto-promotion): "
            + ", ".join(formats.line(m) for m in evidence["models"])
        )
    cell = decision.get("bucket") or "all"
    version_config = configs_by_version.get(evidence.get("config_version"), task_config)
    cell_bounds = tuple(version_config.get("length_buckets", boundaries))
    for w in bad:
        start = dt.datetime.fromisoformat(w["window_start"])
        end = dt.datetime.fromisoformat(w["window_end"])
        with st.expander(f"Example results of {when(start)} – {clock(end)} ({formats.line(cell)})"):
            example_results(task, start, end, cell, cell_bounds)


def example_results(
    task: str, start: dt.datetime, end: dt.datetime, cell: str, bounds: tuple
) -> None:
    found = load_examples(url, task, start, end, cell, bounds)
    if not found:
        st.markdown("No conflicting, invalid, failed or degraded result is stored for this window.")
        return
    for r in found:
        comparison = r["comparison"]
        st.markdown(
            f"Request {formats.line(r['request_id'])} at {when(r['ts'])}: "
            f"{r['input_tokens']} input tokens, "
            f"outcome **{formats.line(comparison['outcome'] or 'none')}**, "
            f"served by {formats.line(r['served'])}"
            + (
                f", degraded ({formats.line(r['degrade_reason'] or 'no reason given')})"
                if r["degraded"]
                else ""
            )
        )
        payload = r["payload"]
        if payload is None:
            st.caption(
                "No payload was kept for this result (payload policy none, or not drawn to "
                "be kept); its counts and comparison are all there is."
            )
        else:
            st.caption(f"Payload as the policy kept it ({formats.line(payload['policy'])}):")
            st.json(
                {k: payload[k] for k in ("input", "edge_output", "cloud_output", "diff")},
                expanded=False,
            )


def gate_evidence(evidence: dict[str, Any]) -> None:
    verdict = evidence.get("gate")
    if verdict is None:
        return
    forced = " It was forced past the gate (audited)." if evidence.get("forced") else ""
    passed = "passed" if verdict["passed"] else "did not pass"
    reasons = "; ".join(formats.line(r) for r in verdict["reasons"])
    st.markdown(f"The gate {passed} then{': ' + reasons if reasons else ''}.{forced}")


for decision in decisions:
    with st.container(border=True):
        stages = f"{decision['stage_before'] or '—'} → {decision['stage_after'] or '—'}"
        st.markdown(
            f"**{when(decision['created_at'])}** · {formats.line(decision['action'])} by "
            f"**{formats.line(decision['actor'])}** ({formats.line(stages)})"
            + (
                f" · rule {formats.line(decision['rule'])} in {formats.line(decision['bucket'])}"
                if decision["rule"]
                else ""
            )
        )
        st.markdown(formats.text(decision["reason"]))
        evidence = decision.get("evidence") or {}
        if evidence.get("steps"):
            cusum_evidence(decision)
        elif evidence.get("windows"):
            evidence_windows(decision)
        elif "gate" in evidence:
            gate_evidence(evidence)


# --- the gate ------------------------------------------------------------------------------

st.header("Promotion gate")
gate = state["gate"]
if gate is not None:
    verdict_words = "passes" if gate["passed"] else "does not pass"
    st.markdown(
        f"The gate {verdict_words} over the last {gate['windows']} windows closed in "
        f"{formats.line(gate['stage'])}"
        + (
            ": " + "; ".join(formats.line(r) for r in gate["reasons"]) + "."
            if gate["reasons"]
            else "."
        )
    )
    gate_rows = [{"bucket": bucket, **view} for bucket, view in gate["buckets"].items()]
    st.dataframe(pd.DataFrame(gate_rows), hide_index=True)
    st.markdown(
        "\n".join(
            f"- {formats.line(row['bucket'])}: **{formats.line(row['verdict'])}** — "
            f"{row['pairs']} pairs, agreement "
            f"{pct(row['agreement'])} (lower bound {pct(row['agreement_low'])})"
            for row in gate_rows
        )
    )


# --- actions (admin) -----------------------------------------------------------------------


def queue_action(kind: str, task: str, expected_stage: str, **extra: Any) -> None:
    """Button callback: remember what was asked and the stage the page showed then (a
    promotion sends it, so a page that went stale gets a conflict, not a surprise)."""
    st.session_state["task_action"] = {
        "kind": kind,
        "task": task,
        "expected_stage": expected_stage,
        **extra,
    }


def readable(action: Any) -> Any:
    """The action, with the gate's and the veto's refusals turned into sentences."""

    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return action(*args, **kwargs)
        except ActionError as exc:
            detail = exc.detail
            if isinstance(detail, dict) and "gate" in detail:
                reasons = "; ".join(detail["gate"].get("reasons") or [])
                raise ActionError(
                    exc.status,
                    f"The promotion gate does not pass ({reasons}). Tick 'force past the gate' "
                    "to promote anyway (audited).",
                ) from None
            if isinstance(detail, dict) and "veto" in detail:
                raise ActionError(exc.status, str(detail["veto"])) from None
            raise

    return run


def perform(pending: dict[str, Any]) -> None:
    reason = str(st.session_state.get("action_reason") or "").strip()
    if not reason:
        st.error("Give a reason first: it is recorded with the action and shown in the decision.")
        return
    who = common.actor(principal)
    kind = pending["kind"]
    done: Any = None
    if kind == "promote":
        done = common.act(
            readable(actions.promote),
            pending["task"],
            actor=who,
            reason=reason,
            veto=Settings().error_cost_veto,
            force=bool(st.session_state.get("promote_force")),
            expected_stage=pending["expected_stage"],
        )
    elif kind == "rollback":
        done = common.act(actions.rollback, pending["task"], actor=who, reason=reason)
    elif kind == "rearm":
        done = common.act(actions.rearm, pending["task"], actor=who, reason=reason)
    elif kind == "unblock":
        done = common.act(
            actions.unblock,
            pending["task"],
            model=pending["model"],
            actor=who,
            reason=reason,
            force=bool(st.session_state.get(f"unblock_force_{pending['model']}")),
        )
    if done is None:
        return
    st.cache_data.clear()
    st.session_state["task_flash"] = (
        done["reason"]
        if "reason" in done
        else f"Unblocked {pending['model']}; still blocked: {', '.join(done['blocked']) or 'none'}."
    )
    st.session_state["action_reason"] = ""
    # A forced action is decided each time: the boxes are unticked once it is done.
    st.session_state["promote_force"] = False
    if kind == "unblock":
        st.session_state.pop(f"unblock_force_{pending['model']}", None)
    st.rerun()


if common.can(principal, "admin"):
    st.header("Actions")
    flash = st.session_state.pop("task_flash", None)
    if flash:
        st.success(formats.text(f"Done: {flash}"))
    pending = st.session_state.pop("task_action", None)
    if pending is not None and pending["task"] == task:
        perform(pending)
    stage, shown = state["stage"], state["expected_stage"]
    # No max_chars: Streamlit would cut a longer paste silently and record the cut text;
    # the action refuses it instead, in a sentence, and nothing is recorded.
    st.text_input(
        "Reason (recorded with the action)",
        key="action_reason",
        help=f"At most {actions.REASON_MAX_CHARS} characters, on the decision and the audit log.",
    )
    promote_col, rollback_col, rearm_col = st.columns(3)
    with promote_col:
        st.checkbox("Force past the gate (audited)", key="promote_force")
        st.button(
            f"Promote from {formats.line(state['stage_words'])}",
            key="promote",
            disabled=stage in ("full", "rolled_back"),
            on_click=queue_action,
            args=("promote", task, shown),
        )
    with rollback_col:
        st.button(
            "Roll back to the cloud",
            key="rollback",
            disabled=stage in ("cloud", "rolled_back"),
            on_click=queue_action,
            args=("rollback", task, shown),
        )
    with rearm_col:
        st.button(
            "Re-arm to shadow",
            key="rearm",
            disabled=stage != "rolled_back",
            on_click=queue_action,
            args=("rearm", task, shown),
        )
    if stage == "rolled_back":
        st.caption("A rolled-back task is re-armed to shadow before it can be promoted again.")

    blocked = state["blocked"]
    if not blocked:
        st.markdown("No edge model is blocked from auto-promotion for this task.")
    for block in blocked:
        model = block["model"]
        with st.container(border=True):
            st.markdown(
                f"Edge model {formats.line(model)} is blocked from auto-promotion since "
                f"{when(block['blocked_at'])} (decision #{block['decision_id']})."
            )
            runs = block["runs"]
            needed = pct(state["regression_min_accuracy"])
            if not runs:
                st.markdown(
                    f"It has no eval runs. Unblocking needs a run on the current regression "
                    f"eval set at {needed} accuracy or more (Eval sets page), or force."
                )
            else:
                st.dataframe(
                    pd.DataFrame(runs)[
                        ["layer", "accuracy", "n", "correct", "current", "actor", "created_at"]
                    ],
                    hide_index=True,
                )
                st.markdown(
                    "\n".join(
                        f"- {formats.line(r['layer'])}: {pct(r['accuracy'])} of {r['n']} items"
                        f"{'' if r['current'] else ' (an older version of the set)'}, "
                        f"{when(r['created_at'])}"
                        for r in runs
                    )
                )
            st.checkbox(
                "Unblock without a passing regression run (audited)", key=f"unblock_force_{model}"
            )
            st.button(
                f"Unblock {formats.line(model)}",
                key=f"unblock_{model}",
                on_click=queue_action,
                args=("unblock", task, shown),
                kwargs={"model": model},
            )


# --- metrics over time -----------------------------------------------------------------------

st.header("Evidence over time")
span = load_span(url, config["id"])
frame = pd.DataFrame()
if span is None:
    st.info(
        f"No windows yet. Results posted to POST /v1/results are counted in windows of "
        f"{config['window_seconds']} s; the first shows here once a pass computes it."
    )
else:
    first, last = span
    period = st.selectbox(
        "Show", list(PERIODS), index=1, key="period", help="Up to the task's newest window."
    )
    since = max(first, last - PERIODS[period])
    frame = load_windows(url, task, since, last)
    st.caption(f"Windows from {when(since)} to {when(last)}.")

events = pd.DataFrame(
    [{"at": d["created_at"], "kind": "decision", "text": d["reason"]} for d in decisions]
    + [
        {"at": a["window_start"] or a["opened_at"], "kind": "alert", "text": a["message"]}
        for a in alerts
    ],
    columns=["at", "kind", "text"],
)
if not events.empty:
    events["at"] = pd.to_datetime(events["at"], utc=True)


def events_within(
    events: pd.DataFrame, first: pd.Timestamp, last: pd.Timestamp, seconds: int
) -> pd.DataFrame:
    """The events from the first window's start to the last window's end: one far off
    would stretch the time axis until the windows are a sliver."""
    if events.empty:
        return events
    end = last + pd.Timedelta(seconds, "s")
    return events[(events["at"] >= first) & (events["at"] <= end)]


if not frame.empty:
    frame["window_start"] = pd.to_datetime(frame["window_start"], utc=True)
    shown_events = events_within(
        events, frame["window_start"].min(), frame["window_start"].max(), config["window_seconds"]
    )
    chosen = st.multiselect(
        "Length buckets", [*buckets, "all"], default=[*buckets, "all"], key="buckets"
    )
    rates = frame[frame["bucket"].isin(chosen)]
    bucket_order = [*buckets, "all"]
    st.caption("Red rules mark decisions, orange rules alerts (hover for their sentence).")
    latest_start = frame.loc[frame["closed"], "window_start"].max()

    agreement_col, calibration_col = st.columns([3, 2])
    with agreement_col:
        st.altair_chart(
            charts.band_lines(
                rates,
                order=bucket_order,
                y="agreement",
                low="agreement_low",
                high="agreement_high",
                title="Agreement (95% interval) and the rule's threshold",
                y_title="agreement",
                threshold=rule_threshold(config, "agreement"),
                threshold_label="agreement rule",
                events=shown_events,
            ),
            width="stretch",
        )
    with calibration_col:
        st.subheader("Can agreement be trusted?")
        calibration = load_calibration(url, config["id"])
        if not calibration:
            st.markdown(
                "No labelled pairs yet, so nobody knows how often the comparator is wrong: "
                "agreement is what the comparator calls equal, not what is right. Label a few "
                "on the Review page."
            )
        for c in calibration:
            precision, miss = c["conflict_precision"], c["agree_miss_rate"]
            st.markdown(
                f"Comparator **{formats.line(c['comparator'])}**: of {precision['n']} labelled conflicts, "
                f"{pct(precision['estimate'])}{interval(precision['low'], precision['high'])} "
                f"were a real difference (conflict precision); of {miss['n']} labelled "
                f"agreeing pairs, {pct(miss['estimate'])}{interval(miss['low'], miss['high'])} "
                "hid a wrong answer (agree miss rate). Agreement is only as good as these: "
                "a high miss rate means wrong edge answers pass as agreeing."
            )
    if pd.notna(latest_start):
        latest = frame[frame["window_start"] == latest_start]
        st.markdown(
            f"Latest closed window ({when(latest_start)}): "
            + "; ".join(
                f"{formats.line(row.bucket)}: agreement {pct(row.agreement)}"
                f"{interval(row.agreement_low, row.agreement_high)} of {row.n_pairs} pairs"
                for row in latest.itertuples()
            )
            + "."
        )

    conflict_col, error_col = st.columns(2)
    with conflict_col:
        st.altair_chart(
            charts.lines(
                rates,
                order=bucket_order,
                y="conflict_rate",
                title="Conflict rate",
                y_title="conflicts / pairs",
                percent=True,
                events=shown_events,
            ),
            width="stretch",
        )
    with error_col:
        st.altair_chart(
            charts.lines(
                rates,
                order=bucket_order,
                y="edge_error_rate",
                title="Edge error rate",
                y_title="errors / edge runs",
                percent=True,
                events=shown_events,
            ),
            width="stretch",
        )
    degrade_col, offload_col = st.columns(2)
    for column, metric, title in (
        (degrade_col, "degrade_rate", "Degrade rate"),
        (offload_col, "offload_fail_rate", "Offload-failure rate"),
    ):
        with column:
            if rates[metric].isna().all():
                st.caption(
                    f"{title}: no edge attempts in these windows (it counts requests the "
                    "router sent to the edge to serve), so there is nothing to draw."
                )
            st.altair_chart(
                charts.band_lines(
                    rates,
                    order=bucket_order,
                    y=metric,
                    low=f"{metric}_low",
                    high=f"{metric}_high",
                    title=title,
                    y_title="of edge attempts",
                    threshold=rule_threshold(config, metric),
                    threshold_label=f"{metric} rule",
                    events=shown_events,
                ),
                width="stretch",
            )

    one = st.selectbox(
        "Bucket for latency, input length and cost", ["all", *buckets], key="detail_bucket"
    )
    detail = frame[frame["bucket"] == one]
    latency = charts.long_form(
        detail,
        {
            f"{side}_latency_ms_{p}": {"side": side, "percentile": p}
            for side in ("edge", "cloud")
            for p in ("p50", "p95", "p99")
        },
        "latency_ms",
    )
    st.altair_chart(
        charts.lines(
            latency,
            y="latency_ms",
            color="side",
            dash="percentile",
            title=f"Latency p50/p95/p99, edge against cloud ({one})",
            y_title="ms",
            events=shown_events,
        ),
        width="stretch",
    )
    length_col, cost_col = st.columns(2)
    with length_col:
        tokens = charts.long_form(
            detail,
            {"input_tokens_p50": {"percentile": "p50"}, "input_tokens_p95": {"percentile": "p95"}},
            "input_tokens",
        )
        st.altair_chart(
            charts.lines(
                tokens,
                y="input_tokens",
                color="percentile",
                title=f"Input length ({one})",
                y_title="tokens",
                events=shown_events,
            ),
            width="stretch",
        )
    with cost_col:
        cost = charts.long_form(
            detail,
            {"total_cost": {"series": "edge + cloud"}, "baseline_cost": {"series": "cloud only"}},
            "cost",
        )
        st.altair_chart(
            charts.lines(
                cost,
                y="cost",
                color="series",
                title=f"Cost against the cloud-only baseline ({one})",
                y_title="cost per window",
                events=shown_events,
            ),
            width="stretch",
        )
    spent, baseline = detail["total_cost"].sum(), detail["baseline_cost"].sum()
    net = detail["net_savings"].dropna()
    st.markdown(
        f"Over these windows ({formats.line(one)}): cost {money(spent)} against {money(baseline)} for the "
        f"cloud alone, saving {money(baseline - spent)}"
        + (f"; net of the edge's fixed cost {money(net.sum())}" if not net.empty else "")
        + "."
    )


# --- route accuracy -----------------------------------------------------------------------

st.header("Route accuracy from labels")
accuracy = [w for w in load_accuracy(url, config["id"]) if w["estimate"] is not None]
if not accuracy:
    st.info(
        "No route-accuracy estimate yet: it comes from reviewers' labels of sampled results "
        f"in windows of {config['review']['route_acc_window_seconds']} s. Label items on the "
        "Review page and it shows here."
    )
else:
    routes = pd.DataFrame(accuracy)
    routes["window_start"] = pd.to_datetime(routes["window_start"], utc=True)
    routes["series"] = "route accuracy"
    accuracy_col, miss_col = st.columns(2)
    with accuracy_col:
        st.altair_chart(
            charts.band_lines(
                routes,
                y="estimate",
                low="low",
                high="high",
                color="series",
                title="Route accuracy (95% interval)",
                y_title="routed right",
                threshold=rule_threshold(config, "route_acc"),
                threshold_label="route_acc rule",
                events=events_within(
                    events,
                    routes["window_start"].min(),
                    routes["window_start"].max(),
                    config["review"]["route_acc_window_seconds"],
                ),
            ),
            width="stretch",
        )
    with miss_col:
        misses = charts.long_form(
            routes,
            {
                "missed_offload": {"kind": "missed_offload"},
                "wrong_offload": {"kind": "wrong_offload"},
            },
            "share",
        )
        st.altair_chart(
            charts.lines(
                misses,
                y="share",
                color="kind",
                percent=True,
                title="missed_offload and wrong_offload",
                y_title="share of labelled results",
            ),
            width="stretch",
        )
    st.caption(
        "missed_offload: sent to the cloud while the edge was right (money left on the "
        "table); wrong_offload: served by the edge, which was wrong (users got a wrong answer)."
    )
    newest = accuracy[0]
    st.markdown(
        f"Newest estimate ({when(newest['window_start'])}): route accuracy "
        f"{pct(newest['estimate'])}{interval(newest['low'], newest['high'])} from "
        f"{newest['n_labels']} labels; missed_offload {pct(newest['missed_offload'])}, "
        f"wrong_offload {pct(newest['wrong_offload'])}."
    )


# --- alerts ----------------------------------------------------------------------------------

st.header("Alerts")
if not alerts:
    st.markdown("No alerts were raised for this task.")
else:
    st.markdown("Alerts are drawn as orange rules on the charts' time axis.")
    st.dataframe(
        pd.DataFrame(alerts)[["opened_at", "kind", "state", "message", "acknowledged_by"]],
        hide_index=True,
    )
    st.markdown(
        "\n".join(
            f"- {when(a['opened_at'])} · {formats.line(a['kind'])} "
            f"({formats.line(a['state'])}): {formats.line(a['message'])}"
            for a in alerts[:20]
        )
    )


# --- routing what-if --------------------------------------------------------------------------

st.header("Routing what-if")
st.markdown(
    "Replays the stored results of a period under another input-length cap and a minimum "
    "edge confidence, beside today's setting: what the edge would have served, its agreement, "
    "offload failures and cost."
)
current_cap = config["max_input_tokens"]
top = max(max(boundaries, default=0) * 2, current_cap or 0, 4096)
no_cap = st.checkbox("No input-length cap", value=current_cap is None, key="whatif_no_cap")
cap = st.slider(
    "max_input_tokens",
    min_value=1,
    max_value=top,
    value=current_cap or max(boundaries, default=top),
    key="whatif_cap",
    disabled=no_cap,
)
use_confidence = st.checkbox("Require a minimum edge confidence", key="whatif_use_confidence")
confidence = st.slider(
    "Minimum edge confidence",
    min_value=0.0,
    max_value=1.0,
    value=float(config.get("low_confidence", 0.6)),
    step=0.05,
    key="whatif_confidence",
    disabled=not use_confidence,
)
default_day = (span[1] - dt.timedelta(seconds=1)).date() if span else dt.datetime.now(dt.UTC).date()
from_col, to_col = st.columns(2)
with from_col:
    first_day = st.date_input("From (UTC day)", value=default_day, key="whatif_from")
with to_col:
    last_day = st.date_input("To (UTC day, included)", value=default_day, key="whatif_to")
whatif_since = dt.datetime.combine(first_day, dt.time(), dt.UTC)
whatif_until = dt.datetime.combine(last_day, dt.time(), dt.UTC) + dt.timedelta(days=1)
if whatif_until <= whatif_since:
    st.warning("The period ends before it starts: pick a 'To' day on or after the 'From' day.")
elif whatif_until - whatif_since > dt.timedelta(days=WHATIF_MAX_DAYS):
    st.warning(f"The what-if replays at most {WHATIF_MAX_DAYS} days; pick a shorter period.")
else:
    asked_setting = (
        task,
        whatif_since,
        whatif_until,
        None if no_cap else int(cap),
        float(confidence) if use_confidence else None,
    )
    # Replays are asked for (a busy day is hundreds of thousands of results): each is kept
    # in the session for its setting, so it shows again until the setting changes.
    kept: dict[tuple[Any, ...], dict[str, Any]] = st.session_state.setdefault("whatif_kept", {})
    replay = kept.get(asked_setting)
    if replay is None:
        if not load_has_results(url, task, whatif_since, whatif_until):
            st.info(
                f"No results stored from {when(whatif_since)} to {when(whatif_until)}: pick a "
                "period with traffic (the evidence above shows when there was some)."
            )
        else:
            st.caption(
                "Replay reads every result stored in the period (a busy day holds hundreds "
                "of thousands), so it runs when asked; it is kept for these settings."
            )
            if st.button("Replay", key="whatif_replay", type="primary"):
                replay = load_whatif(url, *asked_setting)
                if replay is not None:
                    kept[asked_setting] = replay
                    for old in list(kept)[:-WHATIF_KEPT]:
                        del kept[old]
    if replay is not None:
        rows = replay["buckets"]
        total = next((r for r in rows if r["bucket"] == "all"), None)
        if total is None or total["n_results"] == 0:
            st.info(
                f"No results stored from {when(whatif_since)} to {when(whatif_until)}: pick a "
                "period with traffic (the evidence above shows when there was some)."
            )
        else:

            def setting_words(setting: dict[str, Any]) -> str:
                limit = setting["max_input_tokens"]
                minimum = setting["min_confidence"]
                return (f"cap {limit} tokens" if limit is not None else "no cap") + (
                    f", edge confidence at least {minimum:g}" if minimum is not None else ""
                )

            def figures(row: dict[str, Any], setting: str) -> str:
                f = row[setting]
                share, agreement, fails = f["edge_share"], f["agreement"], f["offload_fail_rate"]
                return (
                    f"edge serves {share['num']} of {row['n_results']} ({pct(share['value'])}); "
                    f"agreement {pct(agreement['value'])}"
                    f"{interval(agreement['low'], agreement['high'])} over {agreement['den']} pairs; "
                    f"offload failures {fails['num']} of {fails['den']} edge runs "
                    f"({pct(fails['value'])}); cost {money(f['cost'])} against "
                    f"{money(row['baseline_cost'])} cloud-only (saves {money(f['savings'])})"
                )

            st.markdown(
                f"From {when(whatif_since)} to {when(whatif_until)}, {total['n_results']} results.  \n"
                f"**Candidate** ({setting_words(replay['candidate'])}): {figures(total, 'candidate')}.  \n"
                f"**Today** ({setting_words(replay['current'])}): {figures(total, 'current')}."
            )
            table = []
            for row in rows:
                for setting, label in (("candidate", "candidate"), ("current", "today")):
                    f = row[setting]
                    table.append(
                        {
                            "bucket": row["bucket"],
                            "setting": label,
                            "results": row["n_results"],
                            "edge served": f["edge_share"]["num"],
                            "edge share": f["edge_share"]["value"],
                            "pairs": f["agreement"]["den"],
                            "agreement": f["agreement"]["value"],
                            "agreement low": f["agreement"]["low"],
                            "agreement high": f["agreement"]["high"],
                            "edge runs": f["offload_fail_rate"]["den"],
                            "offload failures": f["offload_fail_rate"]["num"],
                            "offload-failure rate": f["offload_fail_rate"]["value"],
                            "cost": f["cost"],
                            "cloud-only cost": row["baseline_cost"],
                            "savings": f["savings"],
                        }
                    )
            st.dataframe(pd.DataFrame(table), hide_index=True)
            st.markdown(
                "\n".join(
                    f"- {row['bucket']}, candidate: {figures(row, 'candidate')}; "
                    f"today: {figures(row, 'current')}"
                    for row in rows
                    if row["bucket"] != "all"
                )
            )


# --- config versions ---------------------------------------------------------------------------

st.header("Config versions")
if not versions:
    st.info("No config versions are stored for this task.")
elif len(versions) == 1:
    only = versions[0]
    st.markdown(
        f"Only version {only['version']} exists, applied by {formats.line(only['created_by'])} at "
        f"{when(only['created_at'])}; a changed config applied later shows here beside it."
    )
    with st.expander(f"Config version {only['version']}"):
        st.json(only["config"], expanded=True)
else:
    numbers = [v["version"] for v in versions]
    by_number = {v["version"]: v for v in versions}
    left_col, right_col = st.columns(2)
    with left_col:
        older = st.selectbox("Version", numbers, index=1, key="version_left")
    with right_col:
        newer = st.selectbox("Against version", numbers, index=0, key="version_right")
    changes = config_diff(by_number[older]["config"], by_number[newer]["config"])
    if not changes:
        st.markdown(f"Versions {older} and {newer} hold the same config.")
    else:
        st.markdown(
            f"What changed from version {older} to {newer}:\n"
            + "\n".join(
                f"- {formats.line(c['path'])}: {formats.line(repr(c['before']))} → "
                f"{formats.line(repr(c['after']))}"
                for c in changes
            )
        )
    for column, number in ((left_col, older), (right_col, newer)):
        with column:
            v = by_number[number]
            st.caption(
                f"Version {number}{' (current)' if v['current'] else ''}, applied by "
                f"{formats.line(v['created_by'])} at {when(v['created_at'])}"
            )
            st.json(v["config"], expanded=False)
