"""The Audit page and its read model (controlplane.rollout.timeline) on the seeded rollout:
flag changes, decisions, config versions and audit entries in one timeline, newest first,
narrowed by task, actor and days, shown in a table that reads at a glance (times to the
second in UTC, actor and detail in full) and downloaded as the CSV of what is shown."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

import pandas as pd
import pytest
from markdown_it import MarkdownIt
from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage
from streamlit.testing.v1 import AppTest

from controlplane.audit.service import entries
from controlplane.catalog.service import list_task_views
from controlplane.db import session_scope
from controlplane.models import Task
from controlplane.rollout import flags
from controlplane.rollout.service import list_decisions
from controlplane.rollout.timeline import COLUMNS, Event, Filters, actors, csv_text, rows, timeline
from shadowplane_dashboard.auditing import PAGE_EVENTS, page_label, table_rows
from tests.dashboard.conftest import Seeded, open_page, page_text, shown

pytestmark = pytest.mark.integration

PAGE = "app_pages/audit.py"


def read(seeded: Seeded, fn: Any, *args: Any, **kwargs: Any) -> Any:
    with session_scope(seeded.engine) as session:
        return fn(session, *args, **kwargs)


# How the page writes an event's time: UTC, 24-hour, to the second.
TIME = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC$")


def written(at: datetime) -> str:
    """An event's time as the page should write it, by hand: taken to UTC (a naive one is
    UTC already, as stored), then to the second."""
    utc = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    return f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d} {utc.hour:02d}:{utc.minute:02d}:{utc.second:02d} UTC"


def events_table(at: AppTest) -> pd.DataFrame:
    """The page's table of events as a reader sees it (Markdown escapes taken out)."""
    [table] = at.table
    return table.value.map(shown)


def downloads(monkeypatch: pytest.MonkeyPatch) -> dict[str, bytes]:
    """The files the page offers for download from now on, by file name, as bytes."""
    saved: dict[str, bytes] = {}
    original = MemoryMediaFileStorage.load_and_get_id

    def keep(self: Any, data: Any, mimetype: str, kind: Any, filename: str | None = None) -> str:
        if filename is not None:
            saved[filename] = data if isinstance(data, bytes) else data.encode()
        return original(self, data, mimetype, kind, filename)

    monkeypatch.setattr(MemoryMediaFileStorage, "load_and_get_id", keep)
    return saved


@pytest.fixture(params=["seeded", "seeded_sqlite"])
def any_seeded(request: pytest.FixtureRequest) -> Seeded:
    """The seeded rollout on PostgreSQL and on SQLite."""
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


# --- the read model ---------------------------------------------------------------------


def test_the_timeline_holds_every_record_of_each_source(any_seeded: Seeded) -> None:
    events = read(any_seeded, timeline)
    by_kind: dict[str, list[Any]] = {}
    for e in events:
        by_kind.setdefault(e.kind, []).append(e)
    with session_scope(any_seeded.engine) as session:
        history = [h for task in session.query(Task).all() for h in flags.history(session, task.id)]
        decisions = list_decisions(session, limit=10_000)
        logged = entries(session, limit=10_000)
        versions = sum(v["version"] for v in list_task_views(session))
    assert len(by_kind["flag"]) == len(history)
    assert {e.detail.split(" (stage ")[0] for e in by_kind["flag"]} == {h["cause"] for h in history}
    assert sorted(e.detail for e in by_kind["decision"]) == sorted(d["reason"] for d in decisions)
    assert len(by_kind["action"]) == len(logged)
    assert len(by_kind["config"]) == versions
    assert [e.at for e in events] == sorted((e.at for e in events), reverse=True)


def test_a_flag_change_is_credited_to_the_decision_that_made_it(any_seeded: Seeded) -> None:
    events = read(any_seeded, timeline, Filters(task="ticket_classify"))
    decisions = read(any_seeded, list_decisions, "ticket_classify")
    credited = {e.what: e.actor for e in events if e.kind == "flag"}
    for d in decisions:
        assert credited[f"version {d['flag_version_after']}"] == d["actor"]


def test_filters_narrow_the_timeline(any_seeded: Seeded) -> None:
    every = read(any_seeded, timeline)
    by_task = read(any_seeded, timeline, Filters(task="invoice_extract"))
    assert by_task and len(by_task) < len(every)
    assert {e.task for e in by_task} == {"invoice_extract"}
    by_actor = read(any_seeded, timeline, Filters(actor="policy"))
    assert by_actor and {e.actor for e in by_actor} == {"policy"}
    assert "policy" in read(any_seeded, actors)
    # The policy's rollback was stamped with the simulated clock, the rest with today's.
    [rollback] = [d for d in read(any_seeded, list_decisions) if d["action"] == "rollback"]
    day = rollback["created_at"].replace(hour=0, minute=0, second=0, microsecond=0)
    that_day = read(any_seeded, timeline, Filters(since=day, until=day + timedelta(days=1)))
    assert that_day and all(day <= e.at < day + timedelta(days=1) for e in that_day)
    assert rollback["reason"] in {e.detail for e in that_day}
    assert len(that_day) < len(every)


def test_kinds_pick_the_sources(any_seeded: Seeded) -> None:
    decisions = read(any_seeded, timeline, Filters(kinds=("decision",)))
    # By time (the policy's was stamped with the simulated clock), not by id.
    assert sorted(e.detail for e in decisions) == sorted(
        d["reason"] for d in read(any_seeded, list_decisions, limit=10_000)
    )
    both = read(any_seeded, timeline, Filters(kinds=("flag", "config")))
    assert {e.kind for e in both} == {"flag", "config"}
    assert read(any_seeded, timeline, Filters(kinds=())) == []


def test_csv_has_a_header_and_one_row_per_event(any_seeded: Seeded) -> None:
    events = read(any_seeded, timeline)
    parsed = list(csv.DictReader(io.StringIO(csv_text(events))))
    assert parsed == [{k: "" if v is None else str(v) for k, v in r.items()} for r in rows(events)]


# --- the page ---------------------------------------------------------------------------


def test_the_page_shows_the_timeline_with_the_rollback(seeded: Seeded) -> None:
    at = open_page(seeded, "read", PAGE)
    assert not at.exception
    events = read(seeded, timeline)
    assert f"{len(events)} events shown, newest first." in page_text(at)
    frame = events_table(at)
    assert len(frame) == len(events)
    [rollback] = [d for d in read(seeded, list_decisions) if d["action"] == "rollback"]
    assert rollback["reason"] in set(frame["detail"])


def test_task_and_actor_filters_narrow_the_rows(seeded: Seeded) -> None:
    at = open_page(seeded, "read", PAGE)
    total = len(events_table(at))
    at.selectbox(key="audit_task").select("invoice_extract")
    at.run()
    frame = events_table(at)
    assert 0 < len(frame) < total
    assert set(frame["task"]) == {"invoice_extract"}
    assert len(frame) == len(read(seeded, timeline, Filters(task="invoice_extract")))
    at.selectbox(key="audit_task").select("(all)")
    at.selectbox(key="audit_actor").select("policy")
    at.run()
    frame = events_table(at)
    assert 0 < len(frame) < total and set(frame["actor"]) == {"policy"}


def test_show_only_decisions(seeded: Seeded) -> None:
    at = open_page(seeded, "read", PAGE)
    at.multiselect(key="audit_kinds").set_value(["decision"])
    at.run()
    assert not at.exception
    frame = events_table(at)
    reasons = [d["reason"] for d in read(seeded, list_decisions)]
    assert set(frame["kind"]) == {"decision"} and sorted(frame["detail"]) == sorted(reasons)


def test_days_with_nothing_say_so(seeded: Seeded) -> None:
    at = open_page(seeded, "read", PAGE)
    at.date_input(key="audit_until").set_value(date(2000, 1, 1))
    at.run()
    assert not at.exception and not at.table
    assert any("No event matches these filters" in i.value for i in at.info)


def test_the_csv_download_holds_the_rows_shown(
    seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    saved = downloads(monkeypatch)
    at = open_page(seeded, "read", PAGE)
    at.selectbox(key="audit_actor").select("policy")
    at.run()
    assert not at.exception
    data = saved["shadowplane-audit.csv"].decode()
    expected = read(seeded, timeline, Filters(actor="policy"))
    assert data == csv_text(expected)
    parsed = list(csv.DictReader(io.StringIO(data)))
    assert len(parsed) == len(expected) and {r["actor"] for r in parsed} == {"policy"}


def test_a_new_action_shows_at_the_top(seeded: Seeded) -> None:
    from controlplane.rollout.actions import kill

    kill(seeded.engine, actor="admin", reason="drill")
    at = open_page(seeded, "read", PAGE)
    assert not at.exception
    events = read(seeded, timeline)
    assert events[0].actor == "admin"
    frame = events_table(at)
    first = events[0]
    assert [frame.iloc[0][k] for k in ("time", "kind", "actor", "what")] == [
        written(first.at),
        first.kind,
        first.actor,
        first.what,
    ]
    assert ("decision", "admin", "drill") in set(
        zip(frame["kind"], frame["actor"], frame["detail"], strict=True)
    )


def test_a_csv_cell_starting_like_a_formula_keeps_its_text_after_a_quote(seeded: Seeded) -> None:
    from controlplane.rollout.actions import kill, lift

    kill(seeded.engine, actor="@ops", reason="=1+1")
    lift(seeded.engine, actor="admin", reason="-\tback")
    data = csv_text(read(seeded, timeline, Filters(kinds=("decision",))))
    parsed = list(csv.DictReader(io.StringIO(data)))
    assert ("'@ops", "'=1+1") in {(r["actor"], r["detail"]) for r in parsed}
    assert "'-\tback" in {r["detail"] for r in parsed}
    # The page's table shows them as written.
    at = open_page(seeded, "read", PAGE)
    assert {"=1+1", "-\tback"} <= set(events_table(at)["detail"])


# --- reading at a glance ------------------------------------------------------------------


def test_a_time_is_written_in_utc_to_the_second() -> None:
    # 22:33:05.123456 at UTC+2 is 20:33:05 UTC; a naive time is UTC as stored.
    east = datetime(2026, 12, 4, 22, 33, 5, 123456, tzinfo=timezone(timedelta(hours=2)))
    naive = datetime(2026, 12, 4, 0, 0, 59, 999999)
    events = [Event(at, "flag", None, None, "version 1", "") for at in (east, naive)]
    assert list(table_rows(events)["time"]) == [
        "2026-12-04 20:33:05 UTC",
        "2026-12-04 00:00:59 UTC",
    ]
    # Pages of the table: the first holds the newest; the last ends with the last event.
    assert page_label(0, 250) == f"1–{PAGE_EVENTS} (newest)"
    assert page_label(2, 250) == f"{2 * PAGE_EVENTS + 1}–250"


def test_times_read_to_the_second_in_utc(seeded: Seeded) -> None:
    at = open_page(seeded, "read", PAGE)
    assert not at.exception
    events = read(seeded, timeline)
    times = list(events_table(at)["time"])
    # "2026-12-04 20:33:05 UTC": no microseconds, no "+00:00", newest first.
    assert all(TIME.match(t) for t in times), times[:3]
    assert times == [written(e.at) for e in events]
    assert times == sorted(times, reverse=True)


def test_actor_and_detail_are_shown_whole_however_long(seeded: Seeded) -> None:
    from controlplane.rollout.actions import kill

    actor = "night-shift-" + "x" * 180  # an actor is up to 200 characters
    reason = (
        "Edge answers on long tickets look wrong since the 20:30 deploy; "
        + "checked by hand on ten tickets, every one mislabelled as an inquiry. " * 8
        + "Rolled back until the model team answers.\nSecond line: the pager ticket is OPS-4412."
    )
    kill(seeded.engine, actor=actor, reason=reason)
    at = open_page(seeded, "read", PAGE)
    assert not at.exception
    frame = events_table(at)
    assert (actor, reason) in set(zip(frame["actor"], frame["detail"], strict=True))
    # Nothing on the page is cut short: every text is as long as what it shows.
    assert "…" not in page_text(at)
    audited = [e for e in read(seeded, timeline, Filters(actor=actor)) if e.kind == "action"]
    assert audited and set(frame["detail"]) >= {e.detail for e in audited}


def test_an_events_cells_are_text_not_markup(seeded: Seeded) -> None:
    from controlplane.rollout.actions import kill

    image, link = "![img](http://evil.example/x.png)", "[log in](http://evil.example/login)"
    kill(seeded.engine, actor=f"ops {image}", reason=f"{link} <b>now</b> | a | b |")
    at = open_page(seeded, "read", PAGE)
    assert not at.exception
    [table] = at.table
    markdown = MarkdownIt("commonmark").enable("table")
    cells = [str(cell) for column in table.value.columns for cell in table.value[column]]
    hostile = [c for c in cells if "evil.example" in c or "now" in c]
    assert hostile
    for cell in hostile:
        html = markdown.render(cell)
        assert "<img" not in html and "<a " not in html and "<b>" not in html, (cell, html)
        assert "<table" not in html
    frame = events_table(at)
    assert (f"ops {image}", f"{link} <b>now</b> | a | b |") in set(
        zip(frame["actor"], frame["detail"], strict=True)
    )


def test_the_csv_download_is_the_stored_timeline_unchanged(
    seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The table's times are written for people; the download keeps the stored ones (ISO
    8601 with microseconds and the offset) and every other cell as it was."""
    saved = downloads(monkeypatch)
    at = open_page(seeded, "read", PAGE)
    assert not at.exception
    data = saved["shadowplane-audit.csv"]
    events: list[Event] = read(seeded, timeline)
    # The same bytes as the read model's CSV of these events, written out here by hand:
    # the header, then each event's fields in order, `at` as isoformat(), None as "".
    by_hand = io.StringIO()
    writer = csv.writer(by_hand, lineterminator="\n")
    writer.writerow(["at", "kind", "task", "actor", "what", "detail"])
    for e in events:
        writer.writerow([e.at.isoformat(), e.kind, e.task or "", e.actor or "", e.what, e.detail])
    assert all(
        not c.startswith(("=", "+", "-", "@")) for e in events for c in (e.actor or "", e.detail)
    )
    assert data == by_hand.getvalue().encode() == csv_text(events).encode()
    assert list(COLUMNS) == ["at", "kind", "task", "actor", "what", "detail"]
    parsed = list(csv.DictReader(io.StringIO(data.decode())))
    assert [datetime.fromisoformat(r["at"]) for r in parsed] == [e.at for e in events]
    assert any("." in r["at"] for r in parsed)  # microseconds kept


def test_a_long_timeline_is_shown_a_page_at_a_time_and_downloaded_whole(
    seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    from controlplane.rollout.actions import kill, lift

    while len(read(seeded, timeline)) <= PAGE_EVENTS:
        kill(seeded.engine, actor="admin", reason="drill")
        lift(seeded.engine, actor="admin", reason="drill over")
    events = read(seeded, timeline)
    saved = downloads(monkeypatch)
    at = open_page(seeded, "read", PAGE)
    assert not at.exception
    assert f"{len(events)} events shown, newest first." in page_text(at)

    def shows(part: list[Event]) -> None:
        frame = events_table(at)
        assert list(frame["time"]) == [written(e.at) for e in part]
        assert list(frame["detail"]) == [e.detail for e in part]

    shows(events[:PAGE_EVENTS])
    at.selectbox(key="audit_page").select(1).run()
    assert not at.exception
    shows(events[PAGE_EVENTS : 2 * PAGE_EVENTS])
    assert saved["shadowplane-audit.csv"] == csv_text(events).encode()
