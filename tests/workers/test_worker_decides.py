"""A window a real Celery worker closes is judged there too: its alerts open and its rules
roll the task back; and a job that meets a transient database error is retried by Celery
and finishes (real PostgreSQL, Redis broker and worker process)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from sqlalchemy import select
from sqlalchemy.engine import make_url

from controlplane.db import session_scope
from controlplane.models import Task
from controlplane.rollout.configs import apply_config
from controlplane.settings import Settings
from shadowplane_workers.app import make_celery
from shadowplane_workers.schedule import beat_schedule
from tests.conftest import Api, make_api
from tests.grading_support import give_offload_grade
from tests.rollout.test_rollback_e2e import (
    LATENESS,
    WINDOW,
    config,
    promote,
    rewind,
    window_results,
)
from tests.support import CeleryProcess
from tests.windowdata import post_all
from tests.workers.test_celery_worker import worker  # noqa: F401  (a fixture)

pytestmark = pytest.mark.integration


@pytest.fixture
def api(pg_url: str) -> Iterator[Api]:
    for api in make_api(pg_url):
        with session_scope(api.engine) as session:
            apply_config(session, config("canary_task"), actor="test")
        yield api


def plan_at(api: Api, process: CeleryProcess, now: datetime) -> None:
    """What beat does on a tick, at a given clock: send the planning job to the worker's
    broker."""
    settings = Settings(database_url=api.url, redis_url=process.redis_url)
    celery = make_celery(settings)
    entry = beat_schedule(settings)["plan-windows"]
    celery.send_task(entry["task"], kwargs={"now": now.isoformat()})
    celery.close()


def wait_for(what: str, check: Any, process: CeleryProcess, seconds: float = 120) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        if not process.running():
            break
        time.sleep(0.5)
    log = process.log_path.read_text()
    pytest.fail(f"{what} did not happen\n--- worker ---\n{log[-4000:]}")


def stage(api: Api, task: str = "canary_task") -> str:
    return api.client.get(f"/v1/tasks/{task}", headers=api.headers("read")).json()["stage"]


def span_rule_tasks(api: Api) -> None:
    """Two canaries the span rules roll back: `costly`, served by the cloud with the edge
    run beside it and fixed costs of 400 a day (net_savings), and `shifting`, promoted on an
    offload grade of inputs of about 50 tokens that now come at 60 to 3,000 (input_shift)."""
    rules = {
        "costly": {"metric": "net_savings", "op": ">=", "threshold": 0, "span": "5m"},
        "shifting": {"metric": "input_shift", "op": "<=", "threshold": 0.25, "span": "4m"},
    }
    with session_scope(api.engine) as session:
        for name, rule in rules.items():
            extra = (
                {"fixed_costs": {"routing": 100, "gpu": 250, "ops": 50}} if name == "costly" else {}
            )
            apply_config(
                session,
                config(name, rollback={"min_samples": 50, "rules": [rule]}, **extra),
                actor="test",
            )
    give_offload_grade(api.url, "shifting", input_lengths=True)
    for name in rules:
        assert promote(api, name).status_code == 200


def test_a_window_the_worker_closes_opens_its_alerts_and_rolls_the_task_back(
    api: Api,
    worker: CeleryProcess,  # noqa: F811
) -> None:
    assert promote(api, "canary_task").status_code == 200
    span_rule_tasks(api)
    start = rewind(api, windows=8)
    # Three healthy windows (the conflict baseline), then three with long tickets failing:
    # the conflict rate jumps (an alert) and the long bucket breaches (a rollback).
    for k in range(6):
        post_all(api, window_results("canary_task", start, k, {"2048+": 0.4} if k >= 3 else {}))
        for name in ("costly", "shifting"):
            post_all(api, window_results(name, start, k, {}))
    plan_at(api, worker, start + timedelta(seconds=6 * WINDOW + LATENESS))

    wait_for("the rollback", lambda: stage(api) == "rolled_back", worker)
    # The span rules fire in the worker's jobs too; the input shift marks needs_regrade.
    for name in ("costly", "shifting"):
        wait_for(f"the rollback of {name}", lambda n=name: stage(api, n) == "rolled_back", worker)
    hows = {}
    for name in ("costly", "shifting"):
        made = api.client.get(
            "/v1/decisions", params={"task": name}, headers=api.headers("read")
        ).json()["decisions"]
        hows[name] = [(d["action"], d["evidence"].get("how")) for d in reversed(made)]
    assert hows == {
        "costly": [("promote", None), ("rollback", "net_savings")],
        "shifting": [("promote", None), ("rollback", "input_shift"), ("needs_regrade", None)],
    }
    decisions = api.client.get(
        "/v1/decisions", params={"task": "canary_task"}, headers=api.headers("read")
    ).json()["decisions"]
    rollback = next(d for d in decisions if d["action"] == "rollback")
    assert rollback["actor"] == "policy" and rollback["bucket"] == "2048+"
    assert [s["window_start"] for s in rollback["evidence"]["steps"]] == [
        (start + timedelta(seconds=k * WINDOW)).isoformat() for k in (3, 4, 5)
    ]
    alerts = api.client.get(
        "/v1/alerts", params={"task": "canary_task"}, headers=api.headers("read")
    ).json()["alerts"]
    assert "conflict_jump" in {a["kind"] for a in alerts}, alerts


def test_a_transient_database_error_in_a_job_is_retried_and_the_job_finishes(
    api: Api,
    worker: CeleryProcess,  # noqa: F811
) -> None:
    """The test locks the windows table, the worker's job waits on the lock, the test
    terminates the worker's waiting connection (what a database failover does), and
    releases the lock: Celery retries the job, which computes the window."""
    start = rewind(api, windows=4)
    post_all(api, window_results("canary_task", start, 0, {}))
    url = make_url(api.url)
    dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=False) as holder:
        holder.execute("LOCK TABLE windows IN ACCESS EXCLUSIVE MODE")
        plan_at(api, worker, start + timedelta(seconds=WINDOW + LATENESS))

        def waiting() -> list[int]:
            with psycopg.connect(dsn, autocommit=True) as probe:
                rows = probe.execute(
                    "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND datname = current_database() AND pid <> %s",
                    (holder.info.backend_pid,),
                ).fetchall()
            return [pid for (pid,) in rows]

        blocked = wait_for("a job waiting on the lock", waiting, worker)
        with psycopg.connect(dsn, autocommit=True) as killer:
            for pid in blocked:
                killer.execute("SELECT pg_terminate_backend(%s)", (pid,))
        holder.rollback()

    def computed() -> bool:
        rows = api.client.get(
            "/v1/tasks/canary_task/windows",
            params={"since": start.isoformat(), "bucket": "all"},
            headers=api.headers("read"),
        ).json()["windows"]
        return any(r["closed"] and r["n_results"] == 240 for r in rows)

    wait_for("the retried job to compute the window", computed, worker)
    log = worker.log_path.read_text()
    assert "Retry in" in log, log[-3000:]
    with session_scope(api.engine) as session:
        assert session.scalar(select(Task.stage).where(Task.name == "canary_task")) == "shadow"
