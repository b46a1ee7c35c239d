"""A window that closes is evaluated even when the job that closed it is retried: the retry
finds the window closed ("late") and evaluates it all the same (real PostgreSQL, the job's
function called as a worker would, without a broker)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.exc import OperationalError

import controlplane.scheduler
import shadowplane_workers.jobs
from controlplane.db import session_scope
from controlplane.models import Task, Window
from controlplane.rollout.configs import apply_config
from controlplane.settings import Settings
from tests.conftest import Api, make_api
from tests.test_isolation import LATENESS, WINDOW, config, first_future_window, window_results
from tests.windowdata import post_all

pytestmark = pytest.mark.integration


def fails_once(work: Callable[..., Any], calls: list[str], name: str) -> Callable[..., Any]:
    """`work`, except that its first call raises what a dropped connection raises."""

    def flaky(session: Any, **kwargs: Any) -> Any:
        calls.append(name)
        if calls.count(name) == 1:
            raise OperationalError("SELECT 1", {}, Exception("server closed the connection"))
        return work(session, **kwargs)

    return flaky


@pytest.fixture
def api(pg_url: str) -> Iterator[Api]:
    for api in make_api(pg_url):
        with session_scope(api.engine) as session:
            apply_config(session, config("canary_task"), actor="test")
        promoted = api.client.post(
            "/v1/tasks/canary_task/promote",
            json={"reason": "test canary", "force": True},
            headers=api.headers(),
        )
        assert promoted.status_code == 200
        yield api


def test_the_retry_of_a_job_whose_evaluation_failed_evaluates_the_window_it_closed(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shadowplane_workers.jobs, "get_engine", lambda: api.engine)
    monkeypatch.setattr(
        shadowplane_workers.jobs, "get_settings", lambda: Settings(database_url=api.url)
    )
    with session_scope(api.engine) as session:
        task_id = session.scalars(select(Task.id).where(Task.name == "canary_task")).one()

    def stage() -> str:
        with session_scope(api.engine) as session:
            return session.scalars(select(Task.stage).where(Task.id == task_id)).one()

    start = first_future_window()
    for k in range(3):
        post_all(api, window_results("canary_task", start, k, long_conflicts=0.4))

    def job(k: int) -> str:
        window = start + timedelta(seconds=k * WINDOW)
        clock = start + timedelta(seconds=(k + 1) * WINDOW + LATENESS)
        return str(
            shadowplane_workers.jobs.compute_window_job.run(
                task_id, window.isoformat(), clock.isoformat()
            )
        )

    assert [job(0), job(1)] == ["closed", "closed"]
    assert stage() == "canary"

    # The third breaching window closes, and both evaluations meet a dropped connection.
    calls: list[str] = []
    monkeypatch.setattr(
        controlplane.scheduler,
        "evaluate",
        fails_once(controlplane.scheduler.evaluate, calls, "alerts"),
    )
    monkeypatch.setattr(
        controlplane.scheduler,
        "evaluate_rollout",
        fails_once(controlplane.scheduler.evaluate_rollout, calls, "rollout"),
    )
    with pytest.raises(OperationalError):
        job(2)
    with session_scope(api.engine) as session:
        closed_at = session.scalars(
            select(Window.closed_at).where(
                Window.task_id == task_id,
                Window.window_start == start + timedelta(seconds=2 * WINDOW),
            )
        ).one()
    assert closed_at is not None and stage() == "canary"

    # The retry finds the window closed, evaluates it, and the canary rolls back.
    assert job(2) == "late"
    assert calls == ["alerts", "rollout", "alerts", "rollout"]
    assert stage() == "rolled_back"
    decisions = api.client.get(
        "/v1/decisions", params={"task": "canary_task"}, headers=api.headers("read")
    ).json()["decisions"]
    assert [(d["action"], d["bucket"]) for d in decisions] == [
        ("rollback", "2048+"),
        ("promote", None),
    ]
    # Evaluating again (a second retry, a redelivery) decides nothing new.
    assert job(2) == "late"
    assert stage() == "rolled_back"
    assert (
        len(
            api.client.get(
                "/v1/decisions", params={"task": "canary_task"}, headers=api.headers("read")
            ).json()["decisions"]
        )
        == 2
    )
