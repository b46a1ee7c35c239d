"""The same windows never make two decisions or two notices (PostgreSQL): passes run again
and again, and two evaluations at once, announce a firing once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select

from controlplane.catalog.service import runtimes
from controlplane.db import session_scope
from controlplane.models import Decision, OutboxEvent, Task
from controlplane.rollout.configs import apply_config
from controlplane.rollout.evaluation import evaluate_rollout
from tests.conftest import Api, make_api
from tests.liveapi import wait_until
from tests.rollout.test_rollback_e2e import close, config, promote, rewind, window_results
from tests.windowdata import post_all

pytestmark = pytest.mark.integration


@pytest.fixture
def api(pg_url: str) -> Iterator[Api]:
    for api in make_api(pg_url):
        with session_scope(api.engine) as session:
            apply_config(session, config("acting_task"), actor="test")
            watching = config("watching_task")
            watching["rollback"]["rules"] = [{**watching["rollback"]["rules"][0], "mode": "notify"}]
            apply_config(session, watching, actor="test")
        yield api


def events(api: Api, kind: str, task: str) -> list[dict[str, Any]]:
    with session_scope(api.engine) as session:
        return list(
            session.scalars(
                select(OutboxEvent.document)
                .where(OutboxEvent.kind == kind, OutboxEvent.task == task)
                .order_by(OutboxEvent.id)
            )
        )


def test_a_notify_rule_announces_its_firing_once_however_many_passes_run(api: Api) -> None:
    for task in ("acting_task", "watching_task"):
        assert promote(api, task).status_code == 200
    start = rewind(api, tasks=("acting_task", "watching_task"))
    for k in range(3):
        for task in ("acting_task", "watching_task"):
            post_all(api, window_results(task, start, k, {"2048+": 0.4}))
        close(api, start, k)
    # The third window fired both rules: the acting one rolled back, the other noticed.
    assert [e["action"] for e in events(api, "decision", "acting_task")] == ["promote", "rollback"]
    assert len(events(api, "notice", "watching_task")) == 1
    # More passes over the same windows, and a later one with a healthy window: nothing new.
    close(api, start, 2)
    close(api, start, 2)
    post_all(api, window_results("watching_task", start, 3, {}))
    close(api, start, 3)
    notices = events(api, "notice", "watching_task")
    assert len(notices) == 1, notices
    assert "would roll back (rule in notify mode)" in notices[0]["explanation"]
    with session_scope(api.engine) as session:
        stage = session.scalar(select(Task.stage).where(Task.name == "watching_task"))
    assert stage == "canary"


def test_two_evaluations_at_once_make_one_decision(api: Api) -> None:
    """The firing windows close while the rule is off; then the rule is switched on and two
    evaluations run at once, each in its own transaction: one rollback, one decision."""
    quiet = config("acting_task")
    quiet["rollback"]["rules"] = [{**quiet["rollback"]["rules"][0], "mode": "off"}]
    with session_scope(api.engine) as session:
        apply_config(session, quiet, actor="test")
    assert promote(api, "acting_task").status_code == 200
    start = rewind(api, tasks=("acting_task",))
    for k in range(3):
        post_all(api, window_results("acting_task", start, k, {"2048+": 0.4}))
        assert not close(api, start, k).decisions
    with session_scope(api.engine) as session:
        apply_config(session, config("acting_task"), actor="test")
        task_id, version = session.execute(
            select(Task.id, Task.config_version).where(Task.name == "acting_task")
        ).one()

    def sees_the_rule() -> bool:  # each process re-reads the current version within a second
        with session_scope(api.engine) as session:
            return runtimes(session)[task_id][1].config_version == version

    wait_until(sees_the_rule, "the evaluation to read the config with the rule on", 30, 0.1)
    barrier = threading.Barrier(2)
    made: list[int] = []

    def evaluate() -> None:
        barrier.wait()
        with session_scope(api.engine) as session:
            made.append(len(evaluate_rollout(session, task_id, veto=0.7).decisions))

    threads = [threading.Thread(target=evaluate) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(made) == [0, 1]
    with session_scope(api.engine) as session:
        actions = session.scalars(
            select(Decision.action).where(Decision.task_id == task_id).order_by(Decision.id)
        ).all()
        assert list(actions) == ["promote", "rollback"]
    assert len(events(api, "decision", "acting_task")) == 2  # the promotion's and the rollback's
