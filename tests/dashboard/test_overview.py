"""The Overview page and its read model (controlplane.rollout.overview) on the seeded
rollout, whose traffic stopped long ago: every figure of a task's row is the one the
services compute from its last window with results (kept while the task is quiet, with
since when), its sparklines are its windows' own rates, trouble on top, a task rolled back
from its row and the kill switch thrown only with a reason and a confirmation (admin),
alerts acknowledged under the key's name, and a sentence saying what to do when there are
no tasks."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event, select, update
from streamlit.testing.v1 import AppTest

from controlplane.alerts.service import list_alerts
from controlplane.audit.service import entries
from controlplane.catalog.service import list_task_views, runtimes
from controlplane.db import get_engine, session_scope
from controlplane.keys.actions import create_key
from controlplane.metrics.fields import ALL
from controlplane.metrics.service import latest_closed_rows, window_rows
from controlplane.models import Alert, Task, WindowMetrics
from controlplane.models.base import utcnow
from controlplane.rollout import overview as model
from controlplane.rollout.actions import kill
from controlplane.rollout.flags import flags_document
from controlplane.rollout.overview import Point, overview
from controlplane.rollout.service import list_decisions
from controlplane.scheduler import run_pass
from controlplane.sim.evalset_example import END, START
from shadowplane_dashboard.formats import count, line, money, percent
from shadowplane_dashboard.overview import (
    COLUMNS,
    grade_text,
    kept_whole,
    stage_text,
    standing,
    when,
)
from tests.conftest import cloned_database
from tests.dashboard.conftest import Seeded, open_page, page_text, shown
from tests.test_isolation import store_broken_config

pytestmark = pytest.mark.integration

PAGE = "app_pages/overview.py"


def read(seeded: Seeded, fn: Any, *args: Any, **kwargs: Any) -> Any:
    with session_scope(seeded.engine) as session:
        return fn(session, *args, **kwargs)


def closed_all_rows(seeded: Seeded) -> dict[str, list[dict[str, Any]]]:
    """Each task's closed windows' `all` rows, oldest first, as the metrics service gives
    them (the windows API's rows)."""
    with session_scope(seeded.engine) as session:
        return {
            task.name: [r for r in window_rows(session, rt, bucket=ALL) if r["closed"]]
            for task, rt in runtimes(session).values()
        }


def with_results(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The newest of a task's window rows that counts results."""
    return [r for r in rows if r["n_results"]][-1]


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


def test_rows_carry_the_figures_of_each_tasks_last_window_with_results(
    any_seeded: Seeded,
) -> None:
    view = read(any_seeded, overview)
    windows = closed_all_rows(any_seeded)
    buckets: dict[str, list[dict[str, Any]]] = {}
    for r in read(any_seeded, latest_closed_rows):
        if r["bucket"] != ALL and r["agreement_low"] is not None:
            buckets.setdefault(r["task"], []).append(r)
    assert {row.task for row in view.rows} == set(windows)
    for row in view.rows:
        every = with_results(windows[row.task])
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
        # The seed's traffic is long past: quiet since its last window with results ended.
        assert row.quiet_since == every["window_end"]


def test_a_quiet_task_keeps_its_last_figures_and_says_since_when(seeded: Seeded) -> None:
    """The scheduler goes on closing windows after the traffic stops: the latest closed
    window is empty (its agreement None, what the page used to show), the row keeps the
    last window with results; quiet once the window after it should have closed."""
    before = {row.task: row for row in read(seeded, overview).rows}
    # Registered before the traffic (the seed's tasks carry their real creation time, later
    # than its clocks), so a pass computes their empty windows after it.
    with session_scope(seeded.engine) as session:
        session.execute(update(Task).values(created_at=START - timedelta(hours=1)))
    run_pass(seeded.engine, END + timedelta(minutes=30))
    latest = {r["task"]: r for r in read(seeded, latest_closed_rows) if r["bucket"] == ALL}
    windows = closed_all_rows(seeded)
    with session_scope(seeded.engine) as session:
        configs = {task.name: rt.config for task, rt in runtimes(session).values()}
    for task, row in before.items():
        assert latest[task]["n_results"] == 0 and latest[task]["agreement"] is None
        last = with_results(windows[task])
        ended = last["window_end"]
        config = configs[task]
        closes = ended + timedelta(seconds=config.window_seconds + config.allowed_lateness_seconds)
        [after] = [r for r in read(seeded, overview, closes).rows if r.task == task]
        assert (after.window_start, after.agreement, after.edge_share) == (
            last["window_start"],
            last["agreement"],
            last["edge_share"],
        )
        assert after.agreement == row.agreement and after.series == row.series
        assert after.quiet_since == ended
        [early] = [
            r for r in read(seeded, overview, closes - timedelta(seconds=1)).rows if r.task == task
        ]
        assert early.quiet_since is None and early.agreement == row.agreement


def test_the_sparklines_are_the_windows_rates_pooled_in_whole_windows(
    any_seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    windows = closed_all_rows(any_seeded)
    for row in read(any_seeded, overview).rows:
        # 5-minute windows: 288 in a day, one point each.
        assert [(p.start, p.agreement, p.edge_share) for p in row.series] == [
            (r["window_start"], r["agreement"], r["edge_share"])
            for r in windows[row.task]
            if row.window_end - timedelta(hours=24) <= r["window_start"] < row.window_end
        ]
    # A window without results (here the second, its results taken away) is a gap: one
    # point without values where its step starts.
    second = windows["ticket_classify"][1]
    its_row = update(WindowMetrics).where(
        WindowMetrics.task_id
        == select(Task.id).where(Task.name == "ticket_classify").scalar_subquery(),
        WindowMetrics.window_start == second["window_start"],
        WindowMetrics.bucket == ALL,
    )
    with session_scope(any_seeded.engine) as session:
        session.execute(its_row.values(n_results=0))
    [ticket] = [r for r in read(any_seeded, overview).rows if r.task == "ticket_classify"]
    assert ticket.series[1] == Point(second["window_start"], None, None)
    assert [p.start for p in ticket.series] == [r["window_start"] for r in windows[ticket.task]]
    with session_scope(any_seeded.engine) as session:
        session.execute(its_row.values(n_results=second["n_results"]))
    # Fewer points than windows: a point pools as few whole windows as keep the span from
    # the first window with results to the last within SERIES_POINTS, from that first
    # window: the seed's four windows in points of ceil(4 / 3) = ceil(4 / 2) = 2 windows,
    # or of ceil(4 / 1) = 4; their counts summed, then divided.
    for points, per_point in ((3, 2), (2, 2), (1, 4)):
        monkeypatch.setattr(model, "SERIES_POINTS", points)
        for row in read(any_seeded, overview).rows:
            rows = windows[row.task]
            assert len(rows) == 4
            pooled = [rows[i : i + per_point] for i in range(0, len(rows), per_point)]
            assert [p.start for p in row.series] == [c[0]["window_start"] for c in pooled]
            for point, chunk in zip(row.series, pooled, strict=True):
                agree = sum(r["agreement_num"] for r in chunk) / sum(
                    r["agreement_den"] for r in chunk
                )
                edge = sum(r["edge_share_num"] for r in chunk) / sum(
                    r["edge_share_den"] for r in chunk
                )
                assert (point.agreement, point.edge_share) == (
                    pytest.approx(agree),
                    pytest.approx(edge),
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


def test_every_tasks_windows_and_day_of_trend_are_read_in_two_queries(seeded: Seeded) -> None:
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    engine = get_engine(seeded.url)
    event.listen(engine, "before_cursor_execute", seen)
    try:
        view = read(seeded, overview)
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    assert len([r for r in view.rows if r.window_start is not None and r.series]) == 2
    # One for the windows with results and their rows, one for the sparklines.
    assert len([s for s in statements if "window_metrics" in s]) == 2


# --- the page ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def as_read(seeded_once: Seeded) -> AppTest:
    """The page as a read key sees the seeded rollout, rendered once for the tests that only
    read it."""
    return open_page(seeded_once, "read", PAGE)


def table(at: AppTest) -> dict[str, dict[str, Any]]:
    """Each task's row as shown, by task: each column's element (by COLUMNS' keys), in
    the page's order. A row starts at the column holding the link to the task's page."""
    columns = list(at.columns)
    out = {}
    for i, column in enumerate(columns):
        links = [e for e in column.children.values() if type(e).__name__ == "PageLink"]
        if links:
            task = shown(links[0].proto.label)
            out[task] = dict(zip(COLUMNS, columns[i : i + len(COLUMNS)], strict=True))
    return out


def texts(column: Any) -> list[str]:
    """What a cell writes, element by element (a link's label, Markdown as shown)."""
    return [
        shown(e.proto.label if type(e).__name__ == "PageLink" else str(e.value))
        for e in column.children.values()
    ]


def test_each_row_shows_its_figures_in_a_few_words_and_quiet_since_when(
    seeded_once: Seeded, as_read: AppTest
) -> None:
    at = as_read
    assert not at.exception
    now = datetime.now(UTC)
    rows = table(at)
    view = {row.task: row for row in read(seeded_once, overview).rows}
    windows = closed_all_rows(seeded_once)
    assert list(rows) == list(view) == ["ticket_classify", "invoice_extract"]
    for task, cells in rows.items():
        row, every = view[task], with_results(windows[task])
        # Quiet: since the end of its last window with results; its figures are that
        # window's (the read model's figures are checked against the services above).
        said = f"no traffic since {when(every['window_end'], now)}"
        assert texts(cells["task"]) == [task, kept_whole(said)]
        assert texts(cells["stage"]) == [shown(line(stage_text(row)))]
        assert texts(cells["grade"]) == [shown(line(grade_text(row)))]
        [edge] = texts(cells["edge_share"])
        assert edge.startswith(f"**{percent(every['edge_share'])}**\n\n<svg")
        [agreement] = texts(cells["agreement"])
        worst = f"worst {row.worst_bucket} {percent(row.worst_agreement)}"
        assert agreement.startswith(f"**{percent(every['agreement'])}** · {worst}\n\n<svg")
        # One point a window of the day to its last window with results.
        n = len([r for r in windows[task] if r["window_start"] < every["window_end"]])
        assert f'data-points="{n}"' in edge and f'data-points="{n}"' in agreement
        seconds = (every["window_end"] - every["window_start"]).total_seconds()
        assert texts(cells["net_savings"]) == [money(every["net_savings"] * 86400 / seconds)]
        assert texts(cells["open_alerts"]) == [count(row.open_alerts)]
    [rollback] = read(seeded_once, list_decisions, "ticket_classify", 1)
    [decision] = rows["ticket_classify"]["last_decision"].children.values()
    assert shown(decision.value) == f"rollback by policy\n{when(rollback['created_at'], now)}"
    # The decision's sentence is its help, and on the Task page: not written out here.
    assert shown(decision.proto.help) == rollback["reason"]
    assert rollback["reason"] not in page_text(at)
    assert texts(rows["invoice_extract"]["last_decision"]) == ["—"]
    assert not at.dataframe
    assert "In trouble: **ticket_classify** (rolled back" in page_text(at)


def test_a_row_of_windows_shorter_than_a_minute_gives_its_times_to_the_second(
    seeded_once: Seeded,
) -> None:
    [row, *_] = read(seeded_once, overview).rows
    assert row.quiet_since is not None and row.window_start is not None
    ended = row.quiet_since + timedelta(seconds=10)
    short = replace(row, window_end=row.window_start + timedelta(seconds=10), quiet_since=ended)
    # The seed's windows are of 5 minutes; its quiet day is not today.
    assert standing(row, ended) == f"no traffic since {ended - timedelta(seconds=10):%H:%M} UTC"
    assert standing(short, ended) == f"no traffic since {ended:%H:%M:%S} UTC"
    assert standing(short, ended + timedelta(days=1)) == (
        f"no traffic since {ended:%Y-%m-%d %H:%M:%S} UTC"
    )


def test_a_date_in_a_rows_caption_is_kept_on_one_line() -> None:
    # A browser breaks "2026-11-30" after a hyphen where the line ends; the caption's HTML
    # keeps it whole, its other text escaped.
    assert kept_whole("no traffic since 2026-11-30 03:00 UTC") == (
        'no traffic since <span style="white-space:nowrap">2026-11-30</span> 03:00 UTC'
    )
    assert (
        kept_whole("no <b>traffic</b> & 20:33 UTC")
        == "no &lt;b&gt;traffic&lt;/b&gt; &amp; 20:33 UTC"
    )


def test_admin_sees_kill_acknowledge_and_roll_back_and_a_read_key_does_not(
    seeded: Seeded,
) -> None:
    alert_id = add_alert(seeded, "invoice_extract")
    admin = open_page(seeded, "admin", PAGE)
    assert not admin.exception
    assert admin.button(key="kill_submit").label == "Throw the kill switch"
    assert admin.checkbox(key="kill_confirm")
    assert admin.button(key=f"ack_{alert_id}")
    for task in ("ticket_classify", "invoice_extract"):
        assert admin.button(key=f"rollback_submit_{task}").label == "Roll back to the cloud"
        assert admin.checkbox(key=f"rollback_confirm_{task}")
    reader = open_page(seeded, "read", PAGE)
    assert not reader.exception
    keys = {b.key for b in reader.button} | {c.key for c in reader.checkbox}
    assert not {k for k in keys if k and k.startswith(("kill_", "ack_", "rollback_"))}, keys
    assert len(table(reader)["invoice_extract"]) == len(COLUMNS)
    assert not popovers(reader) and len(popovers(admin)) == 2
    # The reader still sees the alert.
    assert "conflict rate jumped to 30%" in page_text(reader)


def popovers(at: AppTest) -> list[Any]:
    """The page's popovers (an admin's Roll back, one per row)."""
    found, todo = [], [at._tree]
    while todo:
        node = todo.pop()
        if getattr(node, "type", None) == "popover":
            found.append(node)
        todo.extend(getattr(node, "children", {}).values())
    return found


def roll_back(at: AppTest, task: str, reason: str, *, confirm: bool) -> None:
    at.text_input(key=f"rollback_reason_{task}").input(reason)
    if confirm:
        at.checkbox(key=f"rollback_confirm_{task}").check()
    at.button(key=f"rollback_submit_{task}").click()
    at.run()


def test_roll_back_from_the_row_only_with_a_reason_and_a_confirmation(seeded: Seeded) -> None:
    task = "invoice_extract"
    flags_before = read(seeded, flags_document)
    at = open_page(seeded, "admin", PAGE)
    roll_back(at, task, "edge answers drift", confirm=False)
    assert not at.exception
    assert [shown(w.value) for w in at.warning] == [
        f"Nothing was done: tick “I understand {task} goes to the cloud” to confirm."
    ]
    roll_back(at, task, "  ", confirm=True)
    assert [shown(w.value) for w in at.warning] == [
        "Nothing was done: say why in Reason (it is kept in the decision)."
    ]
    assert read(seeded, flags_document) == flags_before
    assert read(seeded, list_decisions, task) == []

    roll_back(at, task, "edge answers drift", confirm=True)
    assert not at.exception
    [decision] = read(seeded, list_decisions, task)
    # The Task page's action (controlplane.rollout.actions.rollback), under the key's name.
    assert (decision["action"], decision["actor"], decision["stage_after"]) == (
        "rollback",
        "admin",
        "rolled_back",
    )
    assert decision["reason"].endswith("edge answers drift")
    assert not read(seeded, flags_document)["flags"][task]["edge_percent"]
    [notice] = [shown(s.value) for s in at.success]
    assert notice == f"Done: {decision['reason']}"
    cells = table(at)[task]
    assert texts(cells["stage"]) == ["rolled back"]


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


def test_a_lift_says_which_task_it_left_on_the_cloud(seeded: Seeded) -> None:
    # Its stored config does not parse: nothing says what its stage routes, so the lift
    # leaves its flag killed; the page says so instead of "Kill switch lifted." alone.
    store_broken_config(seeded.engine, "ticket_classify")
    kill(seeded.engine, actor="admin", reason="drill")
    at = open_page(seeded, "admin", PAGE)
    kill_form(at, "drill over", confirm=True, name="lift")
    assert not at.exception
    assert read(seeded, flags_document)["flags"]["ticket_classify"]["killed"] is True
    [notice] = [shown(s.value) for s in at.success]
    assert notice.startswith("Kill switch lifted; still on the cloud: ticket_classify (")


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
