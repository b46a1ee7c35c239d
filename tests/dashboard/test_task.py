"""The task page against the seeded database: the rollback decision in the policy's own
sentence with its evidence table and example results, the gate, the config versions, and
the admin actions (absent for a read key; a promotion from a stale page is a conflict
shown as a message; rollback and re-arm recorded with the admin key's name)."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from controlplane.alerts.service import list_alerts
from controlplane.audit.service import entries
from controlplane.catalog.service import task_runtimes
from controlplane.db import session_scope
from controlplane.review.accuracy import list_windows
from controlplane.rollout import actions
from controlplane.rollout.configs import apply_tasks
from controlplane.rollout.service import list_decisions
from controlplane.rollout.taskview import task_state
from controlplane.scheduler import run_pass
from controlplane.sim.evalset_example import CONFIGS, END
from shadowplane_dashboard.task import evidence
from tests.dashboard.conftest import Seeded, open_page, page_text, shown
from tests.dashboard.vega import charts_on, layer_data, problems, schema_problems

pytestmark = pytest.mark.integration

TASK_PAGE = "app_pages/task.py"
ROLLED_BACK = "ticket_classify"
IN_SHADOW = "invoice_extract"
ACTION_BUTTONS = {"promote", "rollback", "rearm"}


def decisions(seeded: Seeded, task: str) -> list[dict[str, Any]]:
    with session_scope(seeded.engine) as session:
        return list_decisions(session, task)


def on_task(seeded: Seeded, key: str, task: str) -> AppTest:
    """The page on `task`, opened as the Overview's link to it opens it."""
    at = open_page(seeded, key, TASK_PAGE, task=task)
    assert not at.exception, at.exception
    return at


@pytest.fixture(scope="module")
def rolled_back_read(seeded_once: Seeded) -> AppTest:
    """The rolled-back task's page as a read key sees it, rendered once for the tests that
    only read it."""
    return on_task(seeded_once, "read", ROLLED_BACK)


def test_picking_a_task_shows_it_and_puts_it_in_the_address(seeded: Seeded) -> None:
    at = open_page(seeded, "read", TASK_PAGE)
    assert at.selectbox(key="task_pick").value == ROLLED_BACK  # rolled-back tasks first
    at.selectbox(key="task_pick").set_value(IN_SHADOW).run()
    assert not at.exception, at.exception
    assert at.query_params.get("task") == IN_SHADOW
    assert f"**{IN_SHADOW}** is in **shadow**" in page_text(at)


def test_every_chart_draws_with_a_legend_in_utc_and_none_is_empty(
    seeded_once: Seeded, rolled_back_read: AppTest
) -> None:
    """The rolled-back task's charts as Vega would draw them: each has a legend, reads its
    times in UTC, has a value in every field it scales (no infinite extent), gives each
    legend one set of properties, and draws intervals as light bands, never stacked. The
    seed's traffic made no edge attempt, so the degrade and offload-failure charts are
    not drawn: a sentence says there is nothing to draw."""
    at = rolled_back_read
    drawn = charts_on(at)
    assert evidence.DIFFERENCE.title in drawn and evidence.CONFLICTS.title in drawn
    assert {title: problems(*chart) for title, chart in drawn.items()} == {
        title: [] for title in drawn
    }
    # Each as Vega-Lite's schema allows (the page itself no longer validates them).
    assert {title: schema_problems(*chart) for title, chart in drawn.items()} == {
        title: [] for title in drawn
    }
    captions = [c.value for c in at.caption]
    for chart in evidence.PER_EDGE_ATTEMPT:
        assert chart.title not in drawn
        assert evidence.no_edge_attempts(chart) in captions
    # The rollback is marked on the difference chart, at its time, with its sentence.
    rollback = next(d for d in decisions(seeded_once, ROLLED_BACK) if d["action"] == "rollback")
    [marks] = [
        data
        for data in layer_data(drawn[evidence.DIFFERENCE.title], "rule")
        if "kind" in data.columns
    ]
    decided = marks[marks["kind"] == "decision"]
    assert rollback["reason"] in list(decided["text"])


def test_the_rollback_decision_shows_its_sentence_and_the_cusum_run(
    seeded_once: Seeded, rolled_back_read: AppTest
) -> None:
    """The seeded rollback ran the default detector (capped_cusum): its run of windows,
    each with counts, evidence, what counted and the running sum, as table and text."""
    at = rolled_back_read
    text = page_text(at)
    rollback = next(d for d in decisions(seeded_once, ROLLED_BACK) if d["action"] == "rollback")
    evidence = rollback["evidence"]
    steps = evidence["steps"]
    assert rollback["actor"] == "policy" and evidence["detector"] == "capped_cusum"
    assert len(steps) >= 3 and steps[-1]["sum"] >= evidence["h"]
    # The sentence the policy wrote, as it wrote it.
    assert any(shown(m.value) == rollback["reason"] for m in at.markdown)
    assert (
        f"evidence {evidence['statistic']:.1f} ≥ 5 over {len(steps)} windows" in rollback["reason"]
    )
    table = next(df.value for df in at.dataframe if "sum" in df.value and "counts" in df.value)
    assert list(table["counts"]) == [f"{s['num']:g}/{s['den']:g}" for s in steps]
    assert list(table["evidence"]) == [f"{s['contribution']:+.2f}" for s in steps]
    assert list(table["counted"]) == [f"{s['counted']:+.2f}" for s in steps]
    assert list(table["sum"]) == [f"{s['sum']:.2f}" for s in steps]
    assert "each window counts at most 2" in text and "fires at h = 5" in text
    for s in steps:
        assert (
            f"{s['num']:g}/{s['den']:g} = {s['estimate']:.1%}, evidence {s['contribution']:+.2f}, "
            f"counted {s['counted']:+.2f}, sum **{s['sum']:.2f}**"
        ) in text
    models = evidence["models"]
    assert models
    assert (
        "Edge models seen in these windows (blocked from auto-promotion): " + ", ".join(models)
    ) in text
    assert f"**{ROLLED_BACK}** is in **{rollback['stage_after']}**" in text


def test_a_consecutive_rollback_shows_its_evidence_table(seeded: Seeded) -> None:
    """A config that names `consecutive` keeps it: the same windows judged again under it
    (re-armed, canaried from before them) roll back with the verdict table."""
    named = copy.deepcopy(CONFIGS[0])
    named["rollback"]["detector"] = "consecutive"
    engine = seeded.engine
    actions.rearm(engine, ROLLED_BACK, actor="test", reason="judge again under consecutive")
    apply_tasks(engine, [named], actor="test")
    actions.promote(engine, ROLLED_BACK, actor="test", reason="again", veto=0.7, force=True)
    from sqlalchemy import update

    from controlplane.models import Task
    from controlplane.sim.evalset_example import START

    with session_scope(engine) as session:
        session.execute(
            update(Task)
            .where(Task.name == ROLLED_BACK)
            .values(stage_changed_at=START - timedelta(hours=2))
        )
    run_pass(engine, END + timedelta(seconds=150), veto=0.7)
    rollback = decisions(seeded, ROLLED_BACK)[0]
    assert rollback["action"] == "rollback" and rollback["evidence"]["detector"] == "consecutive"
    windows = rollback["evidence"]["windows"]
    assert len(windows) >= 3 and "consecutive windows" in rollback["reason"]

    at = on_task(seeded, "read", ROLLED_BACK)
    text = page_text(at)
    assert any(shown(m.value) == rollback["reason"] for m in at.markdown)
    # The evidence table: one row per judged window with its counts, estimate, bound,
    # threshold and verdict, equal to what the decision stored.
    table = next(df.value for df in at.dataframe if "verdict" in df.value and "counts" in df.value)
    bound = f"{rollback['evidence']['confidence']:.0%} bound"
    assert list(table["counts"]) == [f"{w['num']:g}/{w['den']:g}" for w in windows]
    assert list(table["estimate"]) == [f"{w['estimate']:.1%}" for w in windows]
    assert list(table[bound]) == [f"{w['bound']:.1%}" for w in windows]
    assert list(table["threshold"]) == [f"{w['threshold']:g}" for w in windows]
    assert list(table["verdict"]) == [w["verdict"] for w in windows]
    # And as text (a browser cannot read the table's canvas).
    for w in windows:
        assert (
            f"{w['num']:g}/{w['den']:g} = {w['estimate']:.1%}, {bound} {w['bound']:.1%}, "
            f"threshold {w['threshold']:g}: **{w['verdict']}**"
        ) in text
    breaching = [w for w in windows if w["verdict"] == "breach"]
    labels = [e.label for e in at.expander]
    assert sum(label.startswith("Example results of") for label in labels) >= len(breaching)


def test_example_results_of_the_breaching_windows_show_the_kept_payload(
    seeded_once: Seeded, rolled_back_read: AppTest
) -> None:
    at = rolled_back_read
    rollback = next(d for d in decisions(seeded_once, ROLLED_BACK) if d["action"] == "rollback")
    # The windows of the run that added evidence.
    breaching = [s for s in rollback["evidence"]["steps"] if s["counted"] > 0]
    labels = [e.label for e in at.expander]
    assert sum(label.startswith("Example results of") for label in labels) == len(breaching)
    # The policy's first example (the earliest bad result of the firing's cell) is the first
    # one shown for the first breaching window, with the payload as the policy kept it.
    first = rollback["evidence"]["examples"][0]
    assert f"Request {first} at " in page_text(at)
    payloads = [j.value for j in at.json]
    assert any('"input"' in p and '"edge_output"' in p for p in payloads), payloads[:2]


def test_a_read_key_sees_no_admin_actions(seeded_once: Seeded, rolled_back_read: AppTest) -> None:
    at = rolled_back_read
    keys = {b.key for b in at.button}
    assert not keys & ACTION_BUTTONS
    assert not any(k and k.startswith("unblock_") for k in keys)
    assert "Actions" not in [h.value for h in at.header]
    # The same page for an admin has them (so the check above can fail).
    admin = on_task(seeded_once, "admin", ROLLED_BACK)
    assert ACTION_BUTTONS <= {b.key for b in admin.button}
    assert any((b.key or "").startswith("unblock_") for b in admin.button)


def test_rearm_and_rollback_by_admin_are_recorded_with_the_key_name(seeded: Seeded) -> None:
    at = on_task(seeded, "admin", ROLLED_BACK)
    at.text_input(key="action_reason").set_value("the long-input fix is deployed")
    at.button(key="rearm").click().run()
    assert not at.exception, at.exception
    newest = decisions(seeded, ROLLED_BACK)[0]
    assert (newest["action"], newest["actor"]) == ("rearm", "admin")
    assert newest["reason"] == "re-armed to shadow: the long-input fix is deployed"
    assert f"Done: {newest['reason']}" in page_text(at)

    at.text_input(key="action_reason").set_value("checking by hand")
    at.button(key="rollback").click().run()
    assert not at.exception, at.exception
    newest = decisions(seeded, ROLLED_BACK)[0]
    assert (newest["action"], newest["actor"]) == ("rollback", "admin")
    assert newest["stage_before"] == "shadow" and newest["stage_after"] == "rolled_back"
    assert newest["reason"] == "rolled back by hand: checking by hand"


def test_an_action_without_a_reason_is_refused_in_a_sentence(seeded: Seeded) -> None:
    at = on_task(seeded, "admin", ROLLED_BACK)
    before = decisions(seeded, ROLLED_BACK)
    at.button(key="rearm").click().run()
    assert any("Give a reason first" in e.value for e in at.error)
    assert decisions(seeded, ROLLED_BACK) == before


def test_a_promotion_from_a_stale_page_shows_the_conflict(seeded: Seeded) -> None:
    at = on_task(seeded, "admin", IN_SHADOW)
    assert f"**{IN_SHADOW}** is in **shadow**" in page_text(at)
    # Someone else promotes the task after the page was drawn.
    actions.promote(
        seeded.engine, IN_SHADOW, actor="someone-else", reason="moved first", veto=0.7, force=True
    )
    moved = decisions(seeded, IN_SHADOW)
    at.text_input(key="action_reason").set_value("looks good")
    at.checkbox(key="promote_force").check()
    at.button(key="promote").click().run()
    assert not at.exception, at.exception
    errors = [shown(e.value) for e in at.error]
    assert any("expected_stage" in e and "it has moved since you looked" in e for e in errors), (
        errors
    )
    # Nothing changed: the other person's promotion is still the newest decision.
    assert decisions(seeded, IN_SHADOW) == moved
    assert moved[0]["actor"] == "someone-else"


def test_a_fresh_promotion_goes_through_with_the_stage_shown(seeded: Seeded) -> None:
    at = on_task(seeded, "admin", IN_SHADOW)
    at.text_input(key="action_reason").set_value("first canary")
    at.checkbox(key="promote_force").check()
    at.button(key="promote").click().run()
    assert not at.exception, at.exception
    newest = decisions(seeded, IN_SHADOW)[0]
    assert (newest["action"], newest["actor"]) == ("promote", "admin")
    assert newest["stage_before"] == "shadow" and newest["stage_after"] == "canary"
    assert newest["evidence"]["forced"] is True


def test_a_promotion_the_gate_refuses_is_a_sentence(seeded: Seeded) -> None:
    at = on_task(seeded, "admin", IN_SHADOW)
    at.text_input(key="action_reason").set_value("not forced")
    at.button(key="promote").click().run()
    [error] = [shown(e.value) for e in at.error]
    lines = error.splitlines()
    assert lines[0] == "promotion refused:", error
    # One line for each thing in the way, with its reasons; the gate's and the grade's
    # both (a refusal with both once named only the gate, and forcing went past the grade
    # unsaid); then what forcing does.
    assert any(line.startswith("- the gate (shadow): ") for line in lines), error
    assert lines[-1] == "Ticking 'force past the gate' goes past these (audited, with its reason)."
    assert decisions(seeded, IN_SHADOW) == []


def test_the_task_named_in_the_address_is_shown(seeded: Seeded) -> None:
    at = open_page(seeded, "read", TASK_PAGE)
    assert at.query_params.get("task") == at.selectbox(key="task_pick").value
    at.query_params["task"] = ROLLED_BACK
    at.run()
    assert at.selectbox(key="task_pick").value == ROLLED_BACK
    assert f"**{ROLLED_BACK}** is in" in page_text(at)
    at.query_params["task"] = "no_such_task"
    at.run()
    assert any("There is no task named 'no_such_task'" in shown(w.value) for w in at.warning)


def test_config_versions_side_by_side_with_what_changed(seeded: Seeded) -> None:
    document = copy.deepcopy(next(c for c in CONFIGS if c["task"] == ROLLED_BACK))
    before = document["review"]["quota_per_window"]
    document["review"]["quota_per_window"] = before + 4
    applied = apply_tasks(seeded.engine, [document], actor="admin")
    assert applied[0].version == 2
    at = on_task(seeded, "read", ROLLED_BACK)
    text = page_text(at)
    assert "What changed from version 1 to 2:" in text
    assert f"- review.quota_per_window: {before!r} → {before + 4!r}" in text
    # Only what changed is listed.
    change_lines = [line for line in text.splitlines() if line.startswith("- ") and " → " in line]
    assert change_lines == [f"- review.quota_per_window: {before!r} → {before + 4!r}"]


def blocked(seeded: Seeded, task: str) -> list[str]:
    with session_scope(seeded.engine) as session:
        state = task_state(session, task)
    assert state is not None
    return [b["model"] for b in state["blocked"]]


def test_unblock_needs_a_passing_regression_run_or_force_and_is_audited(seeded: Seeded) -> None:
    models = blocked(seeded, ROLLED_BACK)
    assert models, "the seeded rollback blocks the edge model it saw"
    model = models[0]
    at = on_task(seeded, "admin", ROLLED_BACK)
    assert f"Edge model {model} is blocked from auto-promotion" in page_text(at)
    assert "It has no eval runs." in page_text(at)
    at.text_input(key="action_reason").set_value("new build")
    at.button(key=f"unblock_{model}").click().run()
    errors = [shown(e.value) for e in at.error]
    assert any(e.startswith("model: ") and "force" in e for e in errors), errors
    assert blocked(seeded, ROLLED_BACK) == models

    at.text_input(key="action_reason").set_value("new build, checked by hand")
    at.checkbox(key=f"unblock_force_{model}").check()
    at.button(key=f"unblock_{model}").click().run()
    assert not at.exception, at.exception
    assert blocked(seeded, ROLLED_BACK) == models[1:]
    with session_scope(seeded.engine) as session:
        entry = entries(session, task=ROLLED_BACK, limit=1)[0]
        assert (entry.action, entry.actor) == ("task.unblock", "admin")
        assert entry.details["forced"] is True
        assert entry.details["reason"] == "new build, checked by hand"
    assert f"Done: Unblocked {model}" in page_text(at)


def test_the_page_renders_on_sqlite(seeded_sqlite: Seeded) -> None:
    at = on_task(seeded_sqlite, "read", ROLLED_BACK)
    with session_scope(seeded_sqlite.engine) as session:
        reason = next(d for d in list_decisions(session, ROLLED_BACK) if d["action"] == "rollback")
    assert reason["reason"] in page_text(at)
    assert at.selectbox(key="task_pick").value == ROLLED_BACK


def test_route_accuracy_apart_and_alerts_once_labels_close_a_window(seeded: Seeded) -> None:
    at = on_task(seeded, "read", ROLLED_BACK)
    assert "No route-accuracy estimate yet" in page_text(at)
    assert "No alerts were raised for this task." in page_text(at)
    # A pass a day later closes the labelled route-accuracy window (its lateness is a day);
    # the failure class reviewers named for the first time opens an alert.
    run_pass(seeded.engine, END + timedelta(days=1, hours=2), veto=0.7)
    st.cache_data.clear()
    at.run()
    assert not at.exception, at.exception
    text = page_text(at)
    with session_scope(seeded.engine) as session:
        task_id = task_runtimes(session, {ROLLED_BACK})[ROLLED_BACK].id
        windows = [w for w in list_windows(session, task_id, 10) if w["estimate"] is not None]
        alerts = list_alerts(session, task=ROLLED_BACK)
    assert windows and alerts
    newest = windows[0]
    assert (
        f"route accuracy {newest['estimate']:.1%} ({newest['low']:.1%}–{newest['high']:.1%}) "
        f"from {newest['n_labels']} labels; missed_offload {newest['missed_offload']:.1%}, "
        f"wrong_offload {newest['wrong_offload']:.1%}."
    ) in text
    for alert in alerts:
        assert f"{alert['kind']} ({alert['state']}): {alert['message']}" in text
    # The route-accuracy charts (a band under its line, the rule) and the alerts' rules
    # draw as every other chart: nothing Vega warns of.
    drawn = charts_on(at)
    assert evidence.ROUTE_ACCURACY.title in drawn and evidence.MISSES.title in drawn
    assert {title: problems(*chart) for title, chart in drawn.items()} == {
        title: [] for title in drawn
    }


def test_a_task_without_results_says_what_to_expect_in_sentences(seeded: Seeded) -> None:
    document = {"task": "new_task", "comparator": {"kind": "exact"}}
    apply_tasks(seeded.engine, [document], actor="admin")
    at = open_page(seeded, "read", TASK_PAGE, task="new_task")
    assert not at.exception, at.exception
    assert at.selectbox(key="task_pick").value == "new_task"
    infos = " ".join(i.value for i in at.info)
    assert "No decisions yet." in infos
    assert "No windows yet." in infos
    assert "No route-accuracy estimate yet" in infos
    assert "No results stored from" in infos
    text = page_text(at)
    assert "**new_task** is in **shadow**" in text
    assert "No alerts were raised for this task." in text
    assert "Only version 1 exists, applied by admin" in text


def test_a_link_back_from_another_page_opens_its_task(seeded: Seeded) -> None:
    at = on_task(seeded, "read", IN_SHADOW)
    at.switch_page("app_pages/overview.py")
    at.run()
    # The Overview's link to the task: the Task page with ?task=.
    at.query_params["task"] = IN_SHADOW
    at.switch_page(TASK_PAGE)
    at.run()
    assert not at.exception, at.exception
    assert at.selectbox(key="task_pick").value == IN_SHADOW
    assert f"**{IN_SHADOW}** is in" in page_text(at)


@pytest.mark.parametrize(("stage", "advice"), [("canary", True), ("shadow", False)])
def test_a_task_whose_config_does_not_parse_says_to_roll_a_canary_back_first(
    seeded: Seeded, stage: str, advice: bool
) -> None:
    """Applying the fix publishes the stage's flag again: a canary goes back on the edge, so
    the page says to roll it back first (which works on such a task); a task in shadow is
    only told to apply a valid config."""
    from sqlalchemy import update

    from controlplane.models import Task
    from tests.test_isolation import store_broken_config

    with session_scope(seeded.engine) as session:
        session.execute(update(Task).where(Task.name == IN_SHADOW).values(stage=stage))
    version = store_broken_config(seeded.engine, IN_SHADOW)
    at = open_page(seeded, "read", TASK_PAGE, task=IN_SHADOW)
    assert not at.exception, at.exception
    said = " ".join(e.value for e in at.error).replace("\\_", "_")
    assert f"The stored config version {version} of {IN_SHADOW} does not parse" in said, said
    assert "the policy sends its flag to the cloud" in said
    assert ("roll it back first" in said) is advice, said
