"""The Overview page and its read model (controlplane.rollout.overview) on the seeded
rollout: every figure is the one the services compute, trouble on top, the kill switch
only with a reason and a confirmation (admin), alerts acknowledged under the key's name,
and a sentence saying what to do when there are no tasks."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, select
from streamlit.testing.v1 import AppTest

from controlplane.alerts.service import list_alerts
from controlplane.audit.service import entries
from controlplane.catalog.service import list_task_views
from controlplane.db import get_engine, session_scope
from controlplane.keys.actions import create_key
from controlplane.metrics.fields import ALL
from controlplane.metrics.service import latest_closed_rows
from controlplane.models import Alert, Task
from controlplane.models.base import utcnow
from controlplane.rollout.flags import flags_document
from controlplane.rollout.overview import overview
from controlplane.rollout.service import list_decisions
from dashboard.formats import interval, money, percent
from tests.conftest import cloned_database
from tests.dashboard.conftest import Seeded, open_page, page_text, shown

pytestmark = pytest.mark.integration

PAGE = "app_pages/overview.py"


def read(seeded: Seeded, fn: Any, *args: Any, **kwargs: Any) -> Any:
    with session_scope(seeded.engine) as session:
        return fn(session, *args, **kwargs)


def latest_all(seeded: Seeded) -> dict[str, dict[str, Any]]:
    """The `all` row of each task's latest closed window, as the metrics service gives it."""
    return {r["task"]: r for r in read(seeded, latest_closed_rows) if r["bucket"] == ALL}


def task_line(at: AppTest, task: str) -> str:
    """The task's line of text, as shown (its name and bucket escaped in the Markdown)."""
    [line] = [shown(m.value) for m in at.markdown if shown(m.value).startswith(f"**{task}** — ")]
    return line


def add_alert(seeded: Seeded, task: str, kind: str = "conflict_jump") -> int:
    """An open alert on `task`, as the alert pass would store it."""
    with session_scope(seeded.engine) as session:
        task_id = session.scalar(select(Task.id).where(Task.name == task))
        now = utcnow()
        alert = Alert(
            task_id=task_id,
            kind=kind,
            state="open",
            window_start=now - timedelta(minutes=5),
            value=0.3,
            baseline=0.05,
            message=f"{task}: conflict rate jumped to 30% (baseline 5%)",
            opened_at=now,
            updated_at=now,
        )
        session.add(alert)
        session.flush()
        return alert.id


# --- the read model ---------------------------------------------------------------------


@pytest.fixture(params=["seeded", "seeded_sqlite"])
def any_seeded(request: pytest.FixtureRequest) -> Seeded:
    """The seeded rollout on PostgreSQL and on SQLite."""
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


def test_rows_carry_the_metrics_services_figures(any_seeded: Seeded) -> None:
    view = read(any_seeded, overview)
    latest = latest_all(any_seeded)
    buckets: dict[str, list[dict[str, Any]]] = {}
    for r in read(any_seeded, latest_closed_rows):
        if r["bucket"] != ALL and r["agreement_low"] is not None:
            buckets.setdefault(r["task"], []).append(r)
    assert {row.task for row in view.rows} == set(latest)
    for row in view.rows:
        every = latest[row.task]
        assert row.window_start == every["window_start"]
        assert row.agreement == every["agreement"]
        assert (row.agreement_low, row.agreement_high) == (
            every["agreement_low"],
            every["agreement_high"],
        )
        assert row.edge_share == every["edge_share"]
        assert row.degrade_rate == every["degrade_rate"]
        assert row.offload_fail_rate == every["offload_fail_rate"]
        seconds = (every["window_end"] - every["window_start"]).total_seconds()
        assert row.net_savings_per_day == pytest.approx(every["net_savings"] * 86400 / seconds)
        worst = min(buckets[row.task], key=lambda r: r["agreement_low"])
        assert (row.worst_bucket, row.worst_agreement_low) == (
            worst["bucket"],
            worst["agreement_low"],
        )


def test_stage_flag_and_last_decision_come_from_catalog_flags_and_decisions(
    any_seeded: Seeded,
) -> None:
    view = read(any_seeded, overview)
    stages = {v["task"]: v["stage"] for v in read(any_seeded, list_task_views)}
    flags = read(any_seeded, flags_document)["flags"]
    for row in view.rows:
        assert row.stage == stages[row.task]
        assert row.flag_version == flags[row.task]["version"]
        assert row.edge_percent == flags[row.task]["edge_percent"]
        newest = read(any_seeded, list_decisions, row.task, 1)
        assert row.last_decision == (newest[0] if newest else None)
    ticket = next(row for row in view.rows if row.task == "ticket_classify")
    assert ticket.stage == "rolled_back"
    assert ticket.last_decision is not None and ticket.last_decision["action"] == "rollback"


def test_the_rolled_back_task_is_first_and_its_breaching_bucket_is_the_rollbacks(
    any_seeded: Seeded,
) -> None:
    view = read(any_seeded, overview)
    # By name invoice_extract would come first: the rollback puts ticket_classify on top.
    assert [row.task for row in view.rows] == ["ticket_classify", "invoice_extract"]
    ticket = view.rows[0]
    assert "rolled back" in ticket.trouble
    [rollback] = [d for d in read(any_seeded, list_decisions, "ticket_classify") if d["bucket"]]
    assert rollback["bucket"] in {b.cell for b in ticket.breaches}
    assert view.rows[1].trouble == ()


def test_open_alerts_put_a_task_above_the_quiet_ones(any_seeded: Seeded) -> None:
    with session_scope(any_seeded.engine) as session:
        session.execute(Task.__table__.update().values(stage="canary"))
    add_alert(any_seeded, "invoice_extract")
    view = read(any_seeded, overview)
    # Neither is rolled back now: the open alert outranks ticket_classify's breach.
    assert [row.task for row in view.rows] == ["invoice_extract", "ticket_classify"]
    assert view.rows[0].open_alerts == 1 and view.rows[0].unacknowledged_alerts == 1
    assert [a["task"] for a in view.alerts] == ["invoice_extract"]


def test_the_latest_windows_of_every_task_are_read_in_one_query(seeded: Seeded) -> None:
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    engine = get_engine(seeded.url)
    event.listen(engine, "before_cursor_execute", seen)
    try:
        view = read(seeded, overview)
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    assert len([r for r in view.rows if r.window_start is not None]) == 2
    assert len([s for s in statements if "window_metrics" in s]) == 1


# --- the page ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def as_read(seeded_once: Seeded) -> AppTest:
    """The page as a read key sees the seeded rollout, rendered once for the tests that only
    read it."""
    return open_page(seeded_once, "read", PAGE)


def test_the_page_shows_each_task_with_the_services_figures(
    seeded_once: Seeded, as_read: AppTest
) -> None:
    at = as_read
    assert not at.exception
    latest = latest_all(seeded_once)
    for task, every in latest.items():
        line = task_line(at, task)
        assert f"agreement {percent(every['agreement'])} " in line
        assert interval(every["agreement_low"], every["agreement_high"]) in line
        seconds = (every["window_end"] - every["window_start"]).total_seconds()
        assert f"net savings/day {money(every['net_savings'] * 86400 / seconds)}" in line
    assert task_line(at, "ticket_classify").startswith("**ticket_classify** — rolled_back ·")
    [rollback] = read(seeded_once, list_decisions, "ticket_classify", 1)
    assert rollback["reason"] in page_text(at)
    # The table (drawn on a canvas in a browser) holds the same rows, trouble first.
    [frame] = at.dataframe
    assert list(frame.value["task"]) == ["ticket_classify", "invoice_extract"]
    assert frame.value["last decision"][0] == rollback["reason"]


def test_trouble_on_top_in_the_text_too(as_read: AppTest) -> None:
    at = as_read
    lines = [shown(m.value) for m in at.markdown if " — " in m.value and m.value.startswith("**")]
    assert [line.split("**")[1] for line in lines] == ["ticket_classify", "invoice_extract"]
    assert "In trouble: **ticket_classify** (rolled back" in page_text(at)


def test_admin_sees_kill_and_acknowledge_and_a_read_key_does_not(seeded: Seeded) -> None:
    alert_id = add_alert(seeded, "invoice_extract")
    admin = open_page(seeded, "admin", PAGE)
    assert not admin.exception
    assert admin.button(key="kill_submit").label == "Throw the kill switch"
    assert admin.checkbox(key="kill_confirm")
    assert admin.button(key=f"ack_{alert_id}")
    reader = open_page(seeded, "read", PAGE)
    assert not reader.exception
    keys = {b.key for b in reader.button} | {c.key for c in reader.checkbox}
    assert not {"kill_submit", "kill_confirm", f"ack_{alert_id}"} & keys
    # The reader still sees the alert.
    assert "conflict rate jumped to 30%" in page_text(reader)


def kill_form(at: AppTest, reason: str, *, confirm: bool, name: str = "kill") -> None:
    at.text_input(key=f"{name}_reason").input(reason)
    if confirm:
        at.checkbox(key=f"{name}_confirm").check()
    at.button(key=f"{name}_submit").click()
    at.run()


def test_kill_without_confirmation_changes_nothing(seeded: Seeded) -> None:
    flags_before = read(seeded, flags_document)
    decisions_before = read(seeded, list_decisions)
    at = open_page(seeded, "admin", PAGE)
    kill_form(at, "edge fleet on fire", confirm=False)
    assert not at.exception
    assert read(seeded, flags_document) == flags_before
    assert read(seeded, list_decisions) == decisions_before
    assert any("Nothing was done" in w.value for w in at.warning)


def test_kill_without_a_reason_changes_nothing(seeded: Seeded) -> None:
    flags_before = read(seeded, flags_document)
    at = open_page(seeded, "admin", PAGE)
    kill_form(at, "  ", confirm=True)
    assert read(seeded, flags_document) == flags_before
    assert any("say why" in w.value for w in at.warning)


def test_kill_with_confirmation_kills_every_flag_and_lift_brings_them_back(
    seeded: Seeded,
) -> None:
    at = open_page(seeded, "admin", PAGE)
    kill_form(at, "edge fleet on fire", confirm=True)
    assert not at.exception
    flags = read(seeded, flags_document)["flags"]
    assert flags and all(flag["killed"] for flag in flags.values())
    [newest] = read(seeded, list_decisions, None, 1)
    assert (newest["action"], newest["actor"], newest["reason"]) == (
        "kill",
        "admin",
        "edge fleet on fire",
    )
    text = page_text(at)
    assert "Kill switch thrown" in text
    assert f"**kill** by admin: {newest['reason']}" in text
    # Killed, the form lifts; again only with a confirmation.
    assert at.button(key="lift_submit").label == "Lift the kill switch"
    kill_form(at, "fire out", confirm=False, name="lift")
    assert all(flag["killed"] for flag in read(seeded, flags_document)["flags"].values())
    kill_form(at, "fire out", confirm=True, name="lift")
    assert not any(flag["killed"] for flag in read(seeded, flags_document)["flags"].values())
    [lifted] = read(seeded, list_decisions, None, 1)
    assert (lifted["action"], lifted["actor"], lifted["reason"]) == ("lift", "admin", "fire out")


def test_acknowledge_records_the_keys_name(seeded: Seeded) -> None:
    alert_id = add_alert(seeded, "ticket_classify")
    at = open_page(seeded, "admin", PAGE)
    at.button(key=f"ack_{alert_id}").click()
    at.run()
    assert not at.exception
    [alert] = read(seeded, list_alerts, task="ticket_classify")
    assert (alert["state"], alert["acknowledged_by"]) == ("acknowledged", "admin")
    [entry] = read(seeded, entries, actor="admin")
    assert (entry.action, entry.details["alert"]) == ("alert.ack", alert_id)
    assert "acknowledged by admin" in page_text(at)
    assert not [b for b in at.button if b.key == f"ack_{alert_id}"]


@pytest.fixture
def empty(pg_template: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Seeded]:
    """A migrated database with no tasks, keys of the people's scopes, the app on it."""
    with cloned_database() as url:
        monkeypatch.setenv("SHADOWPLANE_DATABASE_URL", url)
        engine = get_engine(url)
        keys = {
            name: create_key(engine, name=name, scopes=[name], actor="test")[1]
            for name in ("admin", "read")
        }
        yield Seeded(url, keys)


def test_without_tasks_the_page_says_how_to_register_one(empty: Seeded) -> None:
    at = open_page(empty, "read", PAGE)
    assert not at.exception
    [info] = at.info
    assert "No tasks yet" in info.value
    assert "shadowplane tasks apply -f FILE" in info.value and "/v1/tasks" in info.value
    assert "It has never been thrown." in page_text(at)


def test_each_task_links_to_its_task_page(seeded_once: Seeded, as_read: AppTest) -> None:
    at = as_read
    links = [link.proto for link in at.get("page_link")]
    names = [v["task"] for v in read(seeded_once, list_task_views)]
    assert sorted(link.query_string for link in links) == sorted(f"task={n}" for n in names)
    assert {link.page for link in links} == {"task"}


def test_a_database_failure_is_a_sentence(seeded: Seeded, monkeypatch: pytest.MonkeyPatch) -> None:
    from sqlalchemy.exc import OperationalError

    import controlplane.rollout.overview as model

    def down(session: Any) -> Any:
        raise OperationalError("SELECT 1", {}, Exception("connection refused"))

    monkeypatch.setattr(model, "overview", down)
    at = open_page(seeded, "read", PAGE)
    assert not at.exception
    assert any("The database did not answer (OperationalError)" in e.value for e in at.error)


def test_acknowledging_an_alert_someone_acknowledged_meanwhile_says_by_whom(
    seeded: Seeded,
) -> None:
    from controlplane.alerts.actions import acknowledge

    alert_id = add_alert(seeded, "ticket_classify")
    at = open_page(seeded, "admin", PAGE)
    acknowledge(seeded.engine, alert_id, actor="night shift")
    at.button(key=f"ack_{alert_id}").click()
    at.run()
    assert not at.exception
    [alert] = read(seeded, list_alerts, task="ticket_classify")
    assert alert["acknowledged_by"] == "night shift"
    [notice] = [shown(s.value) for s in at.success]
    assert "had already been acknowledged by night shift: nothing was recorded" in notice
    acks = [e.actor for e in read(seeded, entries, limit=10_000) if e.action == "alert.ack"]
    assert acks == ["night shift"]


def test_an_acknowledgement_note_longer_than_the_apis_is_refused_whatever_the_door(
    seeded: Seeded,
) -> None:
    from controlplane.alerts.actions import MAX_NOTE, acknowledge
    from controlplane.errors import ActionError

    alert_id = add_alert(seeded, "ticket_classify")
    with pytest.raises(ActionError) as refused:
        acknowledge(seeded.engine, alert_id, actor="admin", note="x" * (MAX_NOTE + 1))
    assert refused.value.status == 422 and "at most 2000 characters" in str(refused.value)
    [alert] = read(seeded, list_alerts, task="ticket_classify")
    assert alert["state"] == "open"
    acknowledge(seeded.engine, alert_id, actor="admin", note="x" * MAX_NOTE)
    [alert] = read(seeded, list_alerts, task="ticket_classify")
    assert alert["state"] == "acknowledged"
