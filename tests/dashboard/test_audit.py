"""The Audit page and its read model (controlplane.rollout.timeline) on the seeded rollout:
flag changes, decisions, config versions and audit entries in one timeline, newest first,
narrowed by task, actor and days, downloaded as the CSV of what is shown."""

from __future__ import annotations

import csv
import io
from datetime import date, timedelta
from typing import Any

import pytest
from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage

from controlplane.audit.service import entries
from controlplane.catalog.service import list_task_views
from controlplane.db import session_scope
from controlplane.models import Task
from controlplane.rollout import flags
from controlplane.rollout.service import list_decisions
from controlplane.rollout.timeline import Filters, actors, csv_text, rows, timeline
from tests.dashboard.conftest import Seeded, open_page, page_text

pytestmark = pytest.mark.integration

PAGE = "app_pages/audit.py"


def read(seeded: Seeded, fn: Any, *args: Any, **kwargs: Any) -> Any:
    with session_scope(seeded.engine) as session:
        return fn(session, *args, **kwargs)


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
    [frame] = at.dataframe
    assert len(frame.value) == len(events)
    [rollback] = [d for d in read(seeded, list_decisions) if d["action"] == "rollback"]
    assert rollback["reason"] in set(frame.value["detail"])


def test_task_and_actor_filters_narrow_the_rows(seeded: Seeded) -> None:
    at = open_page(seeded, "read", PAGE)
    total = len(at.dataframe[0].value)
    at.selectbox(key="audit_task").select("invoice_extract")
    at.run()
    frame = at.dataframe[0].value
    assert 0 < len(frame) < total
    assert set(frame["task"]) == {"invoice_extract"}
    assert len(frame) == len(read(seeded, timeline, Filters(task="invoice_extract")))
    at.selectbox(key="audit_task").select("(all)")
    at.selectbox(key="audit_actor").select("policy")
    at.run()
    frame = at.dataframe[0].value
    assert 0 < len(frame) < total and set(frame["actor"]) == {"policy"}


def test_show_only_decisions(seeded: Seeded) -> None:
    at = open_page(seeded, "read", PAGE)
    at.multiselect(key="audit_kinds").set_value(["decision"])
    at.run()
    assert not at.exception
    frame = at.dataframe[0].value
    reasons = [d["reason"] for d in read(seeded, list_decisions)]
    assert set(frame["kind"]) == {"decision"} and sorted(frame["detail"]) == sorted(reasons)


def test_days_with_nothing_say_so(seeded: Seeded) -> None:
    at = open_page(seeded, "read", PAGE)
    at.date_input(key="audit_until").set_value(date(2000, 1, 1))
    at.run()
    assert not at.exception and not at.dataframe
    assert any("No event matches these filters" in i.value for i in at.info)


def test_the_csv_download_holds_the_rows_shown(
    seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    saved: dict[str, bytes] = {}
    original = MemoryMediaFileStorage.load_and_get_id

    def keep(self: Any, data: Any, mimetype: str, kind: Any, filename: str | None = None) -> str:
        if filename is not None:
            saved[filename] = data if isinstance(data, bytes) else data.encode()
        return original(self, data, mimetype, kind, filename)

    monkeypatch.setattr(MemoryMediaFileStorage, "load_and_get_id", keep)
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
    frame = at.dataframe[0].value
    first = rows(events)[0]
    assert [frame.iloc[0][k] for k in ("at", "kind", "actor", "what")] == [
        first[k] for k in ("at", "kind", "actor", "what")
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
    assert {"=1+1", "-\tback"} <= set(at.dataframe[0].value["detail"])
