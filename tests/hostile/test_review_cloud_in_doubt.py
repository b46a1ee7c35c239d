"""Hostile review of 'when in doubt, the cloud' (1b0eb1b: a task whose rollout evaluation
keeps failing goes to the cloud), grounding a task whose config does not parse (c4a8cdf,
a405d56) and the rules reading only windows of the current length (364f2aa), as an SRE
woken at night and a routing-service author changing a config, on real PostgreSQL through
the API and the scheduler's functions. Each defect was a strict xfail, and each is fixed.

A failing evaluation is injected as the project's own test does (scheduler.evaluate_rollout
raising: 'a rule that raises, whatever the cause')."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, select, update

from controlplane import scheduler
from controlplane.catalog import service as catalog
from controlplane.catalog.service import RuntimeCache
from controlplane.db import session_scope
from controlplane.models import RouteAccuracyWindow, Task
from controlplane.rollout import repository
from controlplane.rollout.actions import EVALUATION_GRACE
from controlplane.rollout.configs import apply_config
from controlplane.rollout.stages import config_now
from tests.conftest import Api, make_api
from tests.hostile.test_review_upgrade_configs import (
    canary_app,
    flag_announcements,
    flag_of,
    label_config,
)
from tests.review.test_route_accuracy_windows import LATENESS, add_item, refresh

pytestmark = pytest.mark.integration

NAME = "doubt_task"
T = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def _config(**extra: Any) -> dict[str, Any]:
    return label_config(NAME, **extra)


@pytest.fixture
def canary(pg_url: str) -> Iterator[Api]:
    """An app whose `doubt_task` is in canary at 50%."""
    yield from canary_app(pg_url, NAME)


def _flag(api: Api) -> dict[str, Any]:
    return flag_of(api, NAME)


def _task_id(engine: Engine, name: str = NAME) -> int:
    with session_scope(engine) as session:
        found = session.scalar(select(Task.id).where(Task.name == name))
    assert found is not None
    return int(found)


def _broken(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ZeroDivisionError("a rule that cannot be judged")

    monkeypatch.setattr(scheduler, "evaluate_rollout", broken)


def _grounded(api: Api, monkeypatch: pytest.MonkeyPatch) -> int:
    """The canary's evaluation fails from T to past the grace: its flag is on the cloud
    (checked), and the evaluation goes on failing (still patched)."""
    task_id = _task_id(api.engine)
    _broken(monkeypatch)
    # Failing at every window close (5 minutes; a pass retries it sooner), then past the grace.
    for minutes in (0, 5, 10):
        scheduler.after_window(api.engine, task_id, T + timedelta(minutes=minutes), veto=0.7)
        assert _flag(api)["killed"] is False  # within the grace
    scheduler.after_window(
        api.engine, task_id, T + EVALUATION_GRACE + timedelta(minutes=1), veto=0.7
    )
    flag = _flag(api)
    assert (flag["stage"], flag["killed"], flag["edge_percent"]) == ("canary", True, 0), flag
    return task_id


# --- 1. lifting the kill switch un-grounds a task whose evaluation still fails ----------


def test_a_lift_leaves_a_task_whose_evaluation_still_fails_on_the_cloud(
    canary: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = canary
    _grounded(api, monkeypatch)
    # The SRE throws the kill switch for an unrelated incident, then lifts it.
    killed = api.client.post("/v1/kill", json={"reason": "incident"}, headers=api.headers())
    assert killed.status_code == 200, killed.text
    lifted = api.client.post("/v1/kill/lift", json={"reason": "resolved"}, headers=api.headers())
    assert lifted.status_code == 200, lifted.text
    flag = _flag(api)
    # Nothing has judged the canary since: it should still be on the cloud.
    assert (flag["killed"], flag["edge_percent"]) == (True, 0), flag
    # And the lift says so (the CLI prints it and exits 1).
    assert lifted.json()["evidence"].get("left_failing") == [NAME], lifted.json()


# --- 2. any publish (a config apply that fixes nothing) un-grounds it --------------------


def test_an_unrelated_config_change_leaves_a_grounded_task_on_the_cloud(
    canary: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = canary
    _grounded(api, monkeypatch)
    applied = api.client.post("/v1/tasks", json=_config(shadow_rate=0.2), headers=api.headers())
    assert applied.status_code in (200, 201), applied.text
    flag = _flag(api)
    assert (flag["killed"], flag["edge_percent"]) == (True, 0), flag


# --- 3. the grounding is announced, and so is its end ----------------------------------


def _announced(api: Api) -> list[tuple[str, str]]:
    """The task's flag.* change events, as (action, explanation)."""
    return [(d["action"], d["explanation"]) for d in flag_announcements(api, NAME)]


def test_grounding_a_failing_canary_is_announced(
    canary: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = canary
    before = _announced(api)
    task_id = _grounded(api, monkeypatch)
    announced = _announced(api)[len(before) :]
    assert [action for action, _ in announced] == ["flag.grounded"], announced
    assert "every rollout evaluation since" in announced[0][1], announced
    audit = api.client.get(f"/v1/audit?task={NAME}", headers=api.headers())
    assert audit.status_code == 200, audit.text
    assert "flag.grounded" in [e["action"] for e in audit.json()["entries"]], audit.json()
    # Failing on: no second announcement.
    scheduler.after_window(api.engine, task_id, T + EVALUATION_GRACE * 2, veto=0.7)
    assert len(_announced(api)) == len(before) + 1
    # The evaluation works again: the flag is back on the edge, and that is announced too.
    monkeypatch.undo()
    scheduler.after_window(api.engine, task_id, T + EVALUATION_GRACE * 3, veto=0.7)
    assert _flag(api)["killed"] is False
    actions = [action for action, _ in _announced(api)[len(before) :]]
    assert actions == ["flag.grounded", "flag.ungrounded"], actions


# --- 4. a failure row left from long ago grounds at the first blip ----------------------


def test_two_isolated_blips_days_apart_leave_routing_alone(
    canary: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = canary
    task_id = _task_id(api.engine)
    before = _flag(api)
    _broken(monkeypatch)
    scheduler.after_window(api.engine, task_id, T, veto=0.7)  # a restart, one failure
    # No window closes for two days (no traffic): after_window is not called.
    scheduler.after_window(api.engine, task_id, T + timedelta(days=2), veto=0.7)  # one blip
    assert _flag(api) == before


# --- 5. a change of route_acc_window_seconds breaks route accuracy for good -------------

HOUR = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)


@pytest.fixture
def labelled(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Engine]:
    """The label task `acc` of tests/review/test_route_accuracy_windows, hourly windows:
    02:00 closed, 03:00 open. The runtimes re-read each task's current version at every
    look (as a second later), so a pass sees a config just applied."""
    for api in make_api(pg_url):
        url = api.engine.url.render_as_string(hide_password=False)
        monkeypatch.setitem(catalog._runtimes, url, RuntimeCache(current_seconds=0))
        with session_scope(api.engine) as session:
            apply_config(session, _acc(3600), actor="test")
        add_item(api.engine, [("ann", "edge_correct", None)], at=HOUR + timedelta(minutes=10))
        add_item(api.engine, [("ann", "edge_correct", None)], at=HOUR + timedelta(minutes=70))
        refresh(api.engine, HOUR + timedelta(hours=1, seconds=LATENESS))
        with session_scope(api.engine) as session:
            rows = session.execute(
                select(RouteAccuracyWindow.window_start, RouteAccuracyWindow.closed_at).order_by(
                    RouteAccuracyWindow.window_start
                )
            ).all()
        assert [(s, c is not None) for s, c in rows] == [
            (HOUR, True),
            (HOUR + timedelta(hours=1), False),
        ]
        yield api.engine


def _acc(seconds: int) -> dict[str, Any]:
    return {
        "task": "acc",
        "comparator": {"kind": "label"},
        "review": {"route_acc_window_seconds": seconds, "route_acc_lateness_seconds": LATENESS},
    }


def test_route_accuracy_goes_on_after_its_window_length_changes(labelled: Engine) -> None:
    with session_scope(labelled) as session:
        apply_config(session, _acc(7200), actor="test")
    refresh(labelled, HOUR + timedelta(hours=1, minutes=30))
    refresh(labelled, HOUR + timedelta(days=1))


def test_label_windows_are_numbered_once_after_a_length_change(labelled: Engine) -> None:
    with session_scope(labelled) as session:
        session.execute(
            update(Task).where(Task.name == "acc").values(stage_changed_at=HOUR - timedelta(days=1))
        )
    refresh(labelled, HOUR + timedelta(hours=2, seconds=LATENESS))  # 03:00 closes too
    with session_scope(labelled) as session:
        apply_config(session, _acc(7200), actor="test")
    # A two-hour window of the new length (04:00-06:00) gets a label and closes.
    add_item(labelled, [("ann", "edge_correct", None)], at=HOUR + timedelta(hours=2, minutes=10))
    refresh(labelled, HOUR + timedelta(hours=4, seconds=LATENESS))
    with session_scope(labelled) as session:
        task = session.scalars(select(Task).where(Task.name == "acc")).one()
        config = config_now(session, task)
        assert config is not None and config.review.route_acc_window_seconds == 7200
        numbers = [n for n, _ in repository.stage_label_windows(session, task, config)]
    # The hourly windows (02:00 and 03:00 were both number 249445 by start // 7200) are not
    # read after the change, as result windows are not (metrics.windows.of_length): the
    # rules read the new length's windows, each numbered once.
    assert numbers == [int((HOUR + timedelta(hours=2)).timestamp()) // 7200], numbers
