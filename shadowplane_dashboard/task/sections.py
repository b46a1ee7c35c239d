"""The Task page's sections, one render function each, in the order the page shows them.
What a section says comes from `views`, `evidence` and `whatif`; what a button does from
`actions`; every read from `loaders`."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

import pandas as pd
import streamlit as st

from controlplane.auth.service import Principal
from controlplane.catalog.schemas import INT32_MAX
from controlplane.catalog.versions import config_diff
from controlplane.settings import Settings
from shadowplane_dashboard import charts, formats
from shadowplane_dashboard.task import actions, evidence, grading, loaders, spans, views, whatif
from shadowplane_dashboard.task.views import Shown


def draw(
    chart: charts.Chart,
    frame: pd.DataFrame,
    shown: Shown,
    *,
    events: pd.DataFrame | None = None,
    order: list[str] | None = None,
    seconds: bool | None = None,
) -> None:
    """One chart across its column, with its rule's threshold from the task's config, its
    times to the second when the task's windows are not whole minutes (or `seconds`); in
    its place a sentence when there is nothing to draw."""
    if not charts.drawable(chart, frame):
        st.caption(evidence.nothing_to_draw(chart))
        return
    st.vega_lite_chart(
        spec=charts.draw(
            chart,
            frame,
            order=order,
            threshold=evidence.threshold(shown.config, chart),
            events=events,
            seconds=shown.seconds if seconds is None else seconds,
        ),
        width="stretch",
    )


# --- which task, and where it stands ------------------------------------------------------


def task_picker(url: str) -> str:
    """The task to show: `?task=` picks it (links from other pages and alerts), and the
    pick is written back so the address can be shared. Stops when there is no task."""
    names = loaders.load_task_names(url)
    if not names:
        st.info(
            "No tasks yet. Register one with `shadowplane tasks apply -f FILE` (or POST "
            "/v1/tasks with an admin key); its evidence shows here once its routers post results."
        )
        st.stop()
    asked = st.query_params.get("task")
    if asked and asked not in names:
        st.warning(views.unknown_task(asked, names))
    # The picker's own state is dropped while another page is shown: coming back through a
    # link then takes the link's task too.
    chosen = views.pick(
        asked,
        names,
        linked=st.session_state.get("task_linked"),
        current=st.session_state.get("task_pick"),
    )
    if chosen != st.session_state.get("task_pick"):
        st.session_state["task_pick"] = chosen
    task: str = st.selectbox("Task", names, key="task_pick")
    st.session_state["task_linked"] = task
    st.query_params["task"] = task
    return task


def standing(url: str, task: str) -> Shown:
    """Where the task stands, and what every other section reads. Stops when the task is
    gone or its stored config does not parse."""
    state = loaders.load_state(url, task)
    config = loaders.load_config(url, task)
    if state is None:
        st.warning(
            f"The task {formats.line(repr(task))} is gone (deleted since the list was read). "
            "Pick another."
        )
        st.stop()
    seconds = config is not None and formats.seconds_shown(config["window_seconds"])
    st.markdown(views.stage_line(task, state, seconds=seconds))
    banner = spans.regrade_banner(task, state)
    if banner is not None:
        st.error(banner)
    if config is None:
        st.error(
            f"The stored config version {state['config_version']} of {formats.line(task)} "
            "does not parse, so nothing is computed for it, and the policy sends its flag to "
            "the cloud. Apply a valid config (`shadowplane tasks apply -f FILE`)"
            + (
                ": its flag then follows its stage again, so roll it back first if it should "
                "not serve the edge (the Overview's Roll back, or `shadowplane rollback`)."
                if state.get("stage") in ("canary", "full")
                else "."
            )
        )
        st.stop()
    shown = Shown(
        url,
        task,
        state,
        config,
        decisions=loaders.load_decisions(url, task),
        versions=loaders.load_versions(url, task),
        alerts=loaders.load_alerts(url, task),
    )
    if shown.decisions:
        st.markdown(f"Last decision: {formats.text(shown.decisions[0]['reason'])}")
    return shown


# --- decisions ----------------------------------------------------------------------------


def decisions(shown: Shown) -> None:
    st.header("Decisions")
    if not shown.decisions:
        st.info(
            "No decisions yet. The policy writes one when a rollback rule fires (or the gate "
            "promotes with auto_promote); people's promotions, rollbacks and re-arms show here too."
        )
    for decision in shown.decisions:
        with st.container(border=True):
            st.markdown(views.decision_heading(decision, seconds=shown.seconds))
            st.markdown(formats.text(decision["reason"]))
            decision_evidence(shown, decision)


def decision_evidence(shown: Shown, decision: dict[str, Any]) -> None:
    """The windows a rule judged (a CUSUM's run, or a verdict per window) with the example
    results of the bad ones, or the gate a promotion passed."""
    found = decision.get("evidence") or {}
    kind = views.evidence_kind(decision)
    if kind == "span":
        span_evidence(found)
        return
    if kind == "gate":
        passed = views.gate_passed(found)
        if passed is not None:
            st.markdown(passed)
        return
    if kind == "steps":
        st.dataframe(views.step_rows(found), hide_index=True)
        omitted = views.omitted_steps(found)
        if omitted:
            st.caption(omitted)
        st.caption(views.cusum_explained(found))
        st.markdown(views.step_lines(found))
    elif kind == "windows":
        st.dataframe(views.window_rows(found), hide_index=True)
        st.markdown(views.window_lines(found))
    else:
        return
    models = views.models_seen(found)
    if models:
        st.markdown(models)
    cell = decision.get("bucket") or "all"
    bounds = shown.cell_bounds(decision)
    for window in views.bad_windows(decision):
        with st.expander(views.example_heading(window, cell)):
            example_results(shown, window, cell, bounds)


def span_evidence(found: dict[str, Any]) -> None:
    """A span rule's rollback: the money of a net_savings firing, or the index, quarters,
    histograms and longest inputs of an input_shift firing."""
    st.markdown(spans.span_lines(found))
    bins = spans.span_bins(found)
    if bins is not None:
        st.dataframe(bins, hide_index=True)
    for sentence in (views.models_seen(found), spans.longest_inputs(found)):
        if sentence is not None:
            st.markdown(sentence)


def example_results(
    shown: Shown, window: Mapping[str, Any], cell: str, bounds: tuple[int, ...]
) -> None:
    start = dt.datetime.fromisoformat(window["window_start"])
    end = dt.datetime.fromisoformat(window["window_end"])
    found = loaders.load_examples(shown.url, shown.task, start, end, cell, bounds)
    if not found:
        st.markdown("No conflicting, invalid, failed or degraded result is stored for this window.")
        return
    for result in found:
        st.markdown(views.example_line(result, seconds=shown.seconds))
        payload = result["payload"]
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


# --- the gate and the admin's actions -----------------------------------------------------


def gate(shown: Shown) -> None:
    st.header("Promotion gate")
    verdict = shown.state["gate"]
    if verdict is None:
        return
    st.markdown(views.gate_sentence(verdict))
    rows = views.gate_rows(verdict)
    st.dataframe(views.gate_table(rows), hide_index=True)
    st.markdown(views.gate_lines(rows))


def grade(shown: Shown) -> None:
    """The task's newest grade: its tier, the four dimensions as bars against the tiers'
    thresholds (the veto marked on the error cost's), each dimension's signal and sentence,
    what would change the tier, the fields the cloud changes itself, what is missing."""
    st.header("Grade")
    found = shown.state.get("grade")
    if found is None:
        st.info(
            "Not graded yet. A grade is computed daily from the task's windows (and on demand: "
            "`shadowplane grade --task T`); it shows here once one is kept."
        )
        return
    veto = Settings().error_cost_veto
    st.markdown(grading.heading(found))
    st.markdown(grading.tier_line(found))
    frame = grading.bar_frame(found)
    if not frame.empty:
        st.vega_lite_chart(
            spec=charts.draw(
                grading.BARS,
                frame,
                rules=grading.thresholds(shown.config),
                ticks=grading.veto_tick(veto),
            ),
            width="stretch",
        )
        st.caption(
            "Dashed rules: the tiers' thresholds on the weighted score. The red tick on the "
            "error cost's bar is the veto: an error cost at or above it keeps the task on the "
            "cloud, judged before any weighting."
        )
    st.markdown(grading.dimension_lines(found, veto))
    st.subheader("What would change the tier")
    st.markdown(grading.to_change_lines(found) or "Nothing the grade can name.")
    missing = grading.missing_lines(found)
    if missing is not None:
        st.subheader("What is missing")
        st.markdown(missing)
    st.subheader("Noisy fields")
    noisy = grading.noisy_lines(found)
    rate = formats.percent(shown.config["grading"]["noisy_field_rate"])
    if noisy is None:
        st.markdown(f"No field or check changes on more than {rate} of the cloud's repeats.")
    else:
        st.markdown(
            f"The cloud itself changes these on more than {rate} of its repeats: a difference "
            "there says little about the edge."
        )
        st.markdown(noisy)


def admin_actions(shown: Shown, principal: Principal) -> None:
    """Promote, roll back, re-arm and unblock, each with a reason (admin keys only)."""
    st.header("Actions")
    flash = st.session_state.pop(actions.FLASH, None)
    if flash:
        st.success(formats.text(f"Done: {flash}"))
    pending = st.session_state.pop(actions.PENDING, None)
    if pending is not None and pending["task"] == shown.task:
        actions.perform(pending, principal)
    state, task = shown.state, shown.task
    stage, expected = state["stage"], state["expected_stage"]
    # No max_chars: Streamlit would cut a longer paste silently and record the cut text;
    # the action refuses it instead, in a sentence, and nothing is recorded.
    st.text_input(
        "Reason (recorded with the action)",
        key=actions.REASON,
        help=f"At most {actions.REASON_MAX_CHARS} characters, on the decision and the audit log.",
    )
    for column, (kind, label, disabled) in zip(st.columns(3), views.moves(state), strict=True):
        with column:
            if kind == "promote":
                st.checkbox("Force past the gate (audited)", key=actions.FORCE_PROMOTION)
            st.button(
                label,
                key=kind,
                disabled=disabled,
                on_click=actions.queue,
                args=(kind, task, expected),
            )
    if stage == "rolled_back":
        st.caption("A rolled-back task is re-armed to shadow before it can be promoted again.")
    blocked_models(shown)


def blocked_models(shown: Shown) -> None:
    """Each edge model blocked from auto-promotion, its eval runs and its unblock button."""
    blocked = shown.state["blocked"]
    if not blocked:
        st.markdown("No edge model is blocked from auto-promotion for this task.")
    for block in blocked:
        model = block["model"]
        with st.container(border=True):
            st.markdown(views.blocked_line(block))
            runs = block["runs"]
            if not runs:
                st.markdown(views.no_runs(shown.state["regression_min_accuracy"]))
            else:
                st.dataframe(views.run_rows(runs), hide_index=True)
                st.markdown(views.run_lines(runs))
            st.checkbox(
                "Unblock without a passing regression run (audited)",
                key=actions.force_unblock(model),
            )
            st.button(
                f"Unblock {formats.line(model)}",
                key=f"unblock_{model}",
                on_click=actions.queue,
                args=("unblock", shown.task, shown.state["expected_stage"]),
                kwargs={"model": model},
            )


# --- evidence over time -------------------------------------------------------------------


def evidence_over_time(shown: Shown) -> None:
    st.header("Evidence over time")
    config = shown.config
    span = loaders.load_span(shown.url, config["id"])
    if span is None:
        st.info(
            f"No windows yet. Results posted to POST /v1/results are counted in windows of "
            f"{config['window_seconds']} s; the first shows here once a pass computes it."
        )
        return
    period = st.selectbox(
        "Show",
        list(evidence.PERIODS),
        index=1,
        key="period",
        help="Up to the task's newest window.",
    )
    since = evidence.since(span, period)
    frame = loaders.load_windows(shown.url, shown.task, since, span[1])
    seconds = shown.seconds
    st.caption(
        f"Windows from {formats.moment(since, seconds=seconds)} to "
        f"{formats.moment(span[1], seconds=seconds)}."
    )
    if frame.empty:
        return
    frame["window_start"] = pd.to_datetime(frame["window_start"], utc=True)
    events = charts.events_within(
        shown.events,
        frame["window_start"].min(),
        frame["window_start"].max(),
        config["window_seconds"],
    )
    order = [*shown.buckets, "all"]
    chosen = st.multiselect("Length buckets", order, default=order, key="buckets")
    rates = frame[frame["bucket"].isin(chosen)]
    st.caption("Red rules mark decisions, orange rules alerts (hover for their sentence).")

    agreement_col, calibration_col = st.columns([3, 2])
    with agreement_col:
        agreement_difference(shown, rates, events, order)
    with calibration_col:
        calibration(shown)
    latest = evidence.latest_line(frame, seconds=seconds)
    if latest is not None:
        st.markdown(latest)

    for pair in (
        (evidence.CONFLICTS, evidence.EDGE_ERRORS),
        (evidence.DEGRADES, evidence.OFFLOAD_FAILURES),
    ):
        for column, chart in zip(st.columns(2), pair, strict=True):
            with column:
                draw(chart, rates, shown, events=events, order=order)

    one = st.selectbox(
        "Bucket for latency, input length and cost", ["all", *shown.buckets], key="detail_bucket"
    )
    detail = frame[frame["bucket"] == one]
    draw(evidence.of_bucket("latency", one), evidence.latencies(detail), shown, events=events)
    length_col, cost_col = st.columns(2)
    with length_col:
        draw(
            evidence.of_bucket("input_length", one),
            evidence.input_lengths(detail),
            shown,
            events=events,
        )
    with cost_col:
        draw(evidence.of_bucket("cost", one), evidence.costs(detail), shown, events=events)
    st.markdown(evidence.savings_line(detail, one))


def agreement_difference(
    shown: Shown, rates: pd.DataFrame, events: pd.DataFrame, order: list[str]
) -> None:
    """Edge agreement against the task's threshold, with the cloud's noise floor, the
    decisions and the alerts; how to read it under it."""
    threshold, source = evidence.agreement_threshold(shown.config)
    chart = evidence.DIFFERENCE
    frame = evidence.difference_frame(rates, threshold)
    if not charts.drawable(chart, frame):
        st.caption(
            f"{chart.title}: no pairs compared in these windows, so there is nothing to draw."
        )
        return
    st.vega_lite_chart(
        spec=charts.draw(
            chart,
            frame,
            order=order,
            threshold=0.0,
            rule_label=evidence.zero_label(threshold, source),
            events=events,
            seconds=shown.seconds,
        ),
        width="stretch",
    )
    st.caption(evidence.difference_words(threshold, source))


def cost(shown: Shown) -> None:
    """The cost components per window over the net_savings span, their sum in words and
    what the rule says of it."""
    st.header("Cost")
    found = (loaders.load_spans(shown.url, shown.task) or {}).get("cost")
    if found is None:
        st.info("No closed window yet: cost against the cloud baseline shows once one closes.")
        return
    st.markdown(spans.cost_sentence(found, seconds=shown.seconds))
    st.markdown(
        spans.cost_rule_sentence(
            found,
            stage=shown.state["stage"],
            rule_threshold=evidence.rule_threshold(shown.config, "net_savings"),
        )
    )
    frame = spans.cost_frame(found)
    if frame.empty:
        return
    events = charts.events_within(
        shown.events,
        frame["window_start"].min(),
        frame["window_start"].max(),
        shown.config["window_seconds"],
    )
    draw(spans.COST, frame, shown, events=events, order=list(spans.COMPONENTS.values()))
    st.caption(
        "Paid edge and paid cloud: what the task's results cost (shadow runs included); the "
        "cloud baseline: what sending every request to the cloud alone would have cost; the "
        "fixed share: fixed_cost_per_day prorated to a window; net savings: the baseline "
        "less what was paid, less the fixed share."
    )


def input_lengths(shown: Shown) -> None:
    """The input-length histograms of the baseline and of the input_shift span side by
    side, the index between them, and where the alert and the rule stand."""
    st.header("Input lengths")
    found = (loaders.load_spans(shown.url, shown.task) or {}).get("lengths")
    if found is None:
        st.info("No closed window yet: input lengths show once one closes.")
        return
    st.markdown(spans.lengths_sentence(shown.task, found, seconds=shown.seconds))
    baseline, now = spans.histogram_frames(found)
    top = spans.histogram_top(baseline, now)
    baseline_col, now_col = st.columns(2)
    with baseline_col:
        if baseline is None:
            st.caption("No baseline: nothing to draw.")
        else:
            st.vega_lite_chart(
                spec=charts.histogram(spans.BASELINE_BARS, baseline, top=top), width="stretch"
            )
    with now_col:
        st.vega_lite_chart(spec=charts.histogram(spans.NOW_BARS, now, top=top), width="stretch")
    stage = shown.state["stage"]
    st.markdown(spans.alert_sentence(found))
    st.markdown(
        spans.shift_rule_sentence(
            found,
            stage=stage,
            rule_threshold=evidence.rule_threshold(shown.config, "input_shift"),
        )
    )


def calibration(shown: Shown) -> None:
    """How far the comparator's agreement can be trusted, from reviewers' labels."""
    st.subheader("Can agreement be trusted?")
    found = loaders.load_calibration(shown.url, shown.config["id"])
    if not found:
        st.markdown(
            "No labelled pairs yet, so nobody knows how often the comparator is wrong: "
            "agreement is what the comparator calls equal, not what is right. Label a few "
            "on the Review page."
        )
    for comparator in found:
        st.markdown(evidence.calibration_line(comparator))


def route_accuracy(shown: Shown) -> None:
    st.header("Route accuracy from labels")
    config = shown.config
    seconds = config["review"]["route_acc_window_seconds"]
    accuracy = [
        w for w in loaders.load_accuracy(shown.url, config["id"]) if w["estimate"] is not None
    ]
    if not accuracy:
        st.info(
            "No route-accuracy estimate yet: it comes from reviewers' labels of sampled results "
            f"in windows of {seconds} s. Label items on the Review page and it shows here."
        )
        return
    routes = evidence.routes(accuracy)
    events = charts.events_within(
        shown.events, routes["window_start"].min(), routes["window_start"].max(), seconds
    )
    fine = formats.seconds_shown(seconds)
    accuracy_col, miss_col = st.columns(2)
    with accuracy_col:
        draw(evidence.ROUTE_ACCURACY, routes, shown, events=events, seconds=fine)
    with miss_col:
        draw(evidence.MISSES, evidence.misses(routes), shown, seconds=fine)
    st.caption(
        "missed_offload: sent to the cloud while the edge was right (money left on the "
        "table); wrong_offload: served by the edge, which was wrong (users got a wrong answer)."
    )
    st.markdown(evidence.newest_accuracy(accuracy[0], seconds=fine))


# --- alerts, the what-if, config versions -------------------------------------------------


def alerts(shown: Shown) -> None:
    st.header("Alerts")
    if not shown.alerts:
        st.markdown("No alerts were raised for this task.")
        return
    st.markdown("Alerts are drawn as orange rules on the charts' time axis.")
    st.dataframe(views.alert_rows(shown.alerts, seconds=shown.seconds), hide_index=True)
    st.markdown(views.alert_lines(shown.alerts, seconds=shown.seconds))


def routing_whatif(shown: Shown) -> None:
    """Another input-length cap and confidence floor replayed over a period of stored
    results, beside what the flag does today, with the curve of agreement and cost as the
    cap moves; a replay runs when asked."""
    st.header("Routing what-if")
    st.markdown(
        "Replays the stored results of a period under another input-length cap (and, for a "
        "task whose edge reports a confidence, a confidence floor), beside what the task's "
        "flag does today: what the edge would have served, its agreement, offload failures "
        "and cost, and how agreement and cost move with the edge's share as the cap moves."
    )
    config = shown.config
    whatif.start_inputs(st.session_state, shown.task)
    day = whatif.default_day(loaders.load_span(shown.url, config["id"]), dt.datetime.now(dt.UTC))
    from_col, to_col = st.columns(2)
    with from_col:
        first_day = st.date_input("From (UTC day)", value=day, key="whatif_from")
    with to_col:
        last_day = st.date_input("To (UTC day, included)", value=day, key="whatif_to")
    since, until, problem = whatif.period(first_day, last_day)
    if problem is not None:
        st.warning(problem)
        return
    cap_col, floor_col = st.columns(2)
    with cap_col:
        cap = st.number_input(
            "Cap: the most input tokens the edge may serve",
            min_value=1,
            max_value=INT32_MAX,
            value=config["max_input_tokens"],
            step=1,
            placeholder="no cap",
            help="Leave empty for no cap. Starts at the task's cap of today.",
            key="whatif_cap",
        )
    floor = None
    with floor_col:
        if loaders.load_reports_confidence(shown.url, config["id"], since, until):
            floor = st.number_input(
                "Confidence floor: the least edge confidence served",
                min_value=0.0,
                max_value=1.0,
                value=None,
                step=0.01,
                format="%.2f",
                placeholder="no floor",
                help="Leave empty for no floor. An edge answer reporting less goes to the cloud.",
                key="whatif_confidence",
            )
        else:
            st.caption("The edge reported no confidence in this period: there is no floor to set.")
    setting: whatif.Setting = (
        shown.task,
        since,
        until,
        None if cap is None else int(cap),
        None if floor is None else float(floor),
    )
    # Replays are asked for (a busy day is hundreds of thousands of results): each is kept
    # in the session for its setting, so it shows again until the setting changes.
    kept: dict[Any, dict[str, Any]] = st.session_state.setdefault("whatif_kept", {})
    replay = kept.get(setting)
    if replay is None:
        if not loaders.load_has_results(shown.url, shown.task, since, until):
            st.info(whatif.no_results(since, until))
            return
        st.caption(
            "Replay reads every result stored in the period (a busy day holds hundreds "
            "of thousands), so it runs when asked; it is kept for these settings."
        )
        if not st.button("Replay", key="whatif_replay", type="primary"):
            return
        replay = loaders.load_whatif(shown.url, *setting)
        if replay is None:
            return
        whatif.keep(kept, setting, replay)
    if whatif.total(replay) is None:
        st.info(whatif.no_results(since, until))
        return
    st.markdown(whatif.summary(replay, since, until))
    if replay["curve"]:
        agreement_col, cost_col = st.columns(2)
        agreement_chart, cost_chart = whatif.curve_charts(whatif.curve_frame(replay))
        with agreement_col:
            st.vega_lite_chart(spec=agreement_chart, width="stretch")
        with cost_col:
            st.vega_lite_chart(spec=cost_chart, width="stretch")
    st.markdown(whatif.curve_words(replay))
    if replay["curve"]:
        with st.expander("The curve's points"):
            st.dataframe(pd.DataFrame(whatif.curve_rows(replay)), hide_index=True)
    st.dataframe(pd.DataFrame(whatif.rows(replay)), hide_index=True)
    st.markdown(whatif.bucket_lines(replay))


def config_versions(shown: Shown) -> None:
    st.header("Config versions")
    versions = shown.versions
    if not versions:
        st.info("No config versions are stored for this task.")
        return
    if len(versions) == 1:
        only = versions[0]
        st.markdown(views.only_version(only))
        with st.expander(f"Config version {only['version']}"):
            st.json(only["config"], expanded=True)
        return
    numbers = [v["version"] for v in versions]
    by_number = {v["version"]: v for v in versions}
    left_col, right_col = st.columns(2)
    with left_col:
        older = st.selectbox("Version", numbers, index=1, key="version_left")
    with right_col:
        newer = st.selectbox("Against version", numbers, index=0, key="version_right")
    changes = config_diff(by_number[older]["config"], by_number[newer]["config"])
    st.markdown(views.what_changed(older, newer, changes))
    for column, number in ((left_col, older), (right_col, newer)):
        with column:
            st.caption(views.version_caption(by_number[number]))
            st.json(by_number[number]["config"], expanded=False)
