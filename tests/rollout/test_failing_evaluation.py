"""When in doubt, the cloud: a task whose rollout evaluation keeps failing (a rule that
raises, whatever the cause) was logged and retried while its flag went on routing to the
edge with nothing judging it. Past EVALUATION_GRACE of failures its flag goes to the cloud,
stage kept; the first evaluation that works publishes its stage's flag again. A failure
shorter than the grace (a database restart) leaves routing alone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select

from controlplane import scheduler
from controlplane.db import session_scope
from controlplane.models import Task
from controlplane.rollout.actions import EVALUATION_GRACE
from tests.conftest import Api

T = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def _flag(api: Api) -> dict[str, Any]:
    answer = api.client.get("/v1/flags/ticket_classify", headers=api.headers("flags:read"))
    assert answer.status_code == 200, answer.text
    flag: dict[str, Any] = answer.json()
    return flag


def _canary(api: Api) -> None:
    promoted = api.client.post(
        "/v1/tasks/ticket_classify/promote",
        json={"reason": "test canary", "force": True},
        headers=api.headers(),
    )
    assert promoted.status_code == 200, promoted.text


def _task_id(api: Api) -> int:
    listed = api.client.get("/v1/tasks", headers=api.headers("read")).json()["tasks"]

    assert any(t["task"] == "ticket_classify" for t in listed)
    with session_scope(api.engine) as session:
        found = session.scalar(select(Task.id).where(Task.name == "ticket_classify"))
    assert found is not None
    return int(found)


def test_a_canary_whose_evaluation_keeps_failing_goes_to_the_cloud_and_comes_back(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    _canary(api)
    before = _flag(api)
    assert (before["stage"], before["killed"]) == ("canary", False) and before["edge_percent"] > 0
    task_id = _task_id(api)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ZeroDivisionError("a rule that cannot be judged")

    monkeypatch.setattr(scheduler, "evaluate_rollout", broken)
    for minutes in (0, 5, 14):  # failing, within the grace: routing untouched
        done = scheduler.after_window(api.engine, task_id, T + timedelta(minutes=minutes), veto=0.7)
        assert [f.stage for f in done.failed] == ["rollout"]
        assert _flag(api) == before
    past = T + EVALUATION_GRACE + timedelta(minutes=1)
    scheduler.after_window(api.engine, task_id, past, veto=0.7)
    grounded = _flag(api)
    assert (grounded["stage"], grounded["killed"], grounded["edge_percent"]) == ("canary", True, 0)
    assert grounded["default_route"] == "cloud"

    monkeypatch.undo()
    done = scheduler.after_window(api.engine, task_id, past + timedelta(minutes=1), veto=0.7)
    assert not [f for f in done.failed if f.stage == "rollout"], done.failed
    back = _flag(api)
    assert (back["stage"], back["killed"]) == ("canary", False), back
    assert back["edge_percent"] == before["edge_percent"]


def test_a_failure_shorter_than_the_grace_starts_again_after_a_working_evaluation(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    _canary(api)
    before = _flag(api)
    task_id = _task_id(api)
    real = scheduler.evaluate_rollout

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ZeroDivisionError("a rule that cannot be judged")

    monkeypatch.setattr(scheduler, "evaluate_rollout", broken)
    scheduler.after_window(api.engine, task_id, T, veto=0.7)
    monkeypatch.setattr(scheduler, "evaluate_rollout", real)
    scheduler.after_window(api.engine, task_id, T + timedelta(minutes=10), veto=0.7)
    monkeypatch.setattr(scheduler, "evaluate_rollout", broken)
    # Failing again from minute 20: the grace counts from there, not from minute 0.
    scheduler.after_window(api.engine, task_id, T + timedelta(minutes=20), veto=0.7)
    scheduler.after_window(api.engine, task_id, T + timedelta(minutes=30), veto=0.7)
    assert _flag(api) == before
