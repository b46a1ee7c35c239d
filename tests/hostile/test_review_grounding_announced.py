"""Hostile review of announcing a flag the policy sends to the cloud with its stage kept
(6be2f9a: `flag.grounded` / `flag.ungrounded` audit entries and `change` events, and a lift
that leaves a task killed storing a flag version that says why), as an SRE woken at night
and a webhook receiver, on real PostgreSQL through the API and the scheduler's functions.
Each defect was a strict xfail, and each is fixed; the third (flag.ungrounded under the
kill switch) by saying the switch still holds the flag: the announcements follow the
policy's hold, so a start is always paired with its end.

A failing evaluation is injected as the project's own tests do (scheduler.evaluate_rollout
raising)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, select

from controlplane import scheduler
from controlplane.catalog import service as catalog
from controlplane.db import session_scope
from controlplane.models import Task
from controlplane.rollout.actions import EVALUATION_GRACE
from controlplane.rollout.configs import apply_config
from controlplane.rollout.schemas import REASON_MAX_CHARS
from controlplane.scheduler import run_pass
from tests.conftest import Api, make_api
from tests.hostile.test_review_upgrade_configs import (
    canary_app,
    flag_announcements,
    flag_of,
    label_config,
)
from tests.test_isolation import store_broken_config

pytestmark = pytest.mark.integration

NAME = "grounding_task"
T = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def canary(pg_url: str) -> Iterator[Api]:
    """An app whose `grounding_task` is in canary at 50%."""
    yield from canary_app(pg_url, NAME)


def _flag(api: Api) -> dict[str, Any]:
    return flag_of(api, NAME)


def _task_id(engine: Engine) -> int:
    with session_scope(engine) as session:
        found = session.scalar(select(Task.id).where(Task.name == NAME))
    assert found is not None
    return int(found)


def _announced(api: Api) -> list[dict[str, Any]]:
    return flag_announcements(api, NAME)


def _break_evaluation(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ZeroDivisionError("a rule that cannot be judged")

    monkeypatch.setattr(scheduler, "evaluate_rollout", broken)


def _fail_past_the_grace(api: Api, task_id: int) -> None:
    """Evaluations failing at each window close from T, then past the grace."""
    for minutes in (0, 5, 10):
        scheduler.after_window(api.engine, task_id, T + timedelta(minutes=minutes), veto=0.7)
    scheduler.after_window(
        api.engine, task_id, T + EVALUATION_GRACE + timedelta(minutes=1), veto=0.7
    )


def _post(api: Api, path: str, reason: str) -> dict[str, Any]:
    answer = api.client.post(path, json={"reason": reason}, headers=api.headers())
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


# --- 1. grounded while the kill switch is on: never announced, and the lift's flag says
#        the lifted kill's reason --------------------------------------------------------


def test_a_task_grounded_under_the_kill_switch_is_announced(
    canary: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = canary
    task_id = _task_id(api.engine)
    _post(api, "/v1/kill", "incident")
    _break_evaluation(monkeypatch)
    _fail_past_the_grace(api, task_id)
    lifted = _post(api, "/v1/kill/lift", "resolved")
    assert lifted["evidence"].get("left_failing") == [NAME], lifted  # grounded: on the cloud
    assert _flag(api)["killed"] is True
    monkeypatch.undo()
    scheduler.after_window(api.engine, task_id, T + EVALUATION_GRACE * 2, veto=0.7)
    assert _flag(api)["killed"] is False
    actions = [d["action"] for d in _announced(api)]
    assert actions == ["flag.grounded", "flag.ungrounded"], actions


def test_a_task_left_on_the_cloud_by_failing_evaluations_after_a_lift_says_why(
    canary: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = canary
    task_id = _task_id(api.engine)
    _post(api, "/v1/kill", "incident")
    _break_evaluation(monkeypatch)
    _fail_past_the_grace(api, task_id)
    _post(api, "/v1/kill/lift", "resolved")
    run_pass(api.engine, datetime.now(UTC))
    flag = _flag(api)
    assert flag["killed"] is True
    assert "rollout evaluation" in flag["reason"], flag


# --- 2. flag.ungrounded announced while the flag stays killed -----------------------------


def test_flag_ungrounded_under_the_kill_switch_says_the_switch_still_holds_it(
    canary: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The announcements follow the policy's hold, not the flag's version: its end under the
    kill switch is announced (paired with its start), saying the switch still holds the
    flag; the lift, a decision, is what returns it."""
    api = canary
    task_id = _task_id(api.engine)
    _break_evaluation(monkeypatch)
    _fail_past_the_grace(api, task_id)
    assert [d["action"] for d in _announced(api)] == ["flag.grounded"]
    _post(api, "/v1/kill", "incident")
    before = _flag(api)
    monkeypatch.undo()
    scheduler.after_window(api.engine, task_id, T + EVALUATION_GRACE * 2, veto=0.7)
    assert _flag(api)["version"] == before["version"] and _flag(api)["killed"] is True
    announced = _announced(api)
    assert [d["action"] for d in announced] == ["flag.grounded", "flag.ungrounded"]
    assert announced[0]["details"]["kill_switch"] is False
    assert announced[1]["details"]["kill_switch"] is True
    assert "the kill switch still holds its flag on the cloud" in announced[1]["explanation"]
    _post(api, "/v1/kill/lift", "resolved")
    flag = _flag(api)
    assert (flag["killed"], flag["edge_percent"]) == (False, 50), flag


# --- 3. a lift with a long reason: the flag no longer says why it is left killed ----------


def test_a_long_lift_reason_keeps_why_the_task_is_left_killed(canary: Api) -> None:
    api = canary
    _post(api, "/v1/kill", "upgrade")
    version = store_broken_config(api.engine, NAME)
    catalog._runtimes.clear()
    run_pass(api.engine, datetime.now(UTC))
    lifted = _post(api, "/v1/kill/lift", "x" * REASON_MAX_CHARS)
    assert lifted["evidence"].get("left_killed") == [NAME], lifted
    flag = _flag(api)
    assert flag["killed"] is True
    assert len(flag["reason"]) <= REASON_MAX_CHARS
    assert f"stored config version {version} does not parse" in flag["reason"], flag["reason"][
        -200:
    ]


# --- 4. kill, lift, kill: the flag of the task left killed says 'lift' under a kill -------


def test_a_second_kill_does_not_leave_a_flag_saying_lift(canary: Api) -> None:
    api = canary
    _post(api, "/v1/kill", "upgrade")
    store_broken_config(api.engine, NAME)
    catalog._runtimes.clear()
    run_pass(api.engine, datetime.now(UTC))
    _post(api, "/v1/kill/lift", "upgraded")
    _post(api, "/v1/kill", "second incident")
    run_pass(api.engine, datetime.now(UTC))
    flag = _flag(api)
    assert flag["killed"] is True
    assert not flag["reason"].startswith("lift:"), flag


# --- 5. docs/http-api.md: flag.grounded 'and back (flag.ungrounded)' for either cause ---


def test_a_config_fixed_after_grounding_announces_the_return(canary: Api) -> None:
    api = canary
    store_broken_config(api.engine, NAME)
    catalog._runtimes.clear()
    run_pass(api.engine, datetime.now(UTC))
    assert _flag(api)["killed"] is True
    fixed = api.client.post(
        "/v1/tasks", json=label_config(NAME, shadow_rate=0.2), headers=api.headers()
    )
    assert fixed.status_code in (200, 201), fixed.text
    run_pass(api.engine, datetime.now(UTC))
    assert _flag(api)["killed"] is False
    actions = [d["action"] for d in _announced(api)]
    assert actions == ["flag.grounded", "flag.ungrounded"], actions


def test_a_task_on_the_cloud_whose_config_breaks_is_not_announced(pg_url: str) -> None:
    """A task in stage `cloud` routes nothing to the edge and runs no shadow: holding its
    flag on the cloud changes nothing a team could act on, so no `flag.grounded` (and no
    `flag.ungrounded` at its fix) reaches the webhook at night. Its flag is still held."""
    for api in make_api(pg_url):
        with session_scope(api.engine) as session:
            apply_config(session, {**label_config(NAME), "stage": "cloud"}, actor="test")
        assert _flag(api)["stage"] == "cloud"
        store_broken_config(api.engine, NAME)
        catalog._runtimes.clear()
        run_pass(api.engine, datetime.now(UTC))
        assert _flag(api)["killed"] is True
        fixed = api.client.post(
            "/v1/tasks", json={**label_config(NAME), "stage": "cloud"}, headers=api.headers()
        )
        assert fixed.status_code in (200, 201), fixed.text
        run_pass(api.engine, datetime.now(UTC))
        assert _flag(api)["killed"] is False
        assert _announced(api) == []
