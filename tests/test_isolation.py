"""One task that fails never stops the others: a stored config that no longer parses, a
failing plan, alert or rollout evaluation is logged, named in the pass's report and
skipped; the other tasks' windows close and roll back; a later pass handles the task."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, select

from controlplane import scheduler
from controlplane.catalog import service as catalog
from controlplane.catalog.service import RuntimeCache
from controlplane.db import session_scope
from controlplane.metrics import service
from controlplane.models import Decision, Task, TaskConfigVersion
from controlplane.rollout.configs import apply_config
from controlplane.scheduler import run_pass
from tests.conftest import Api, make_api, make_result
from tests.windowdata import post_all

# Short windows: the traffic of three windows stays within a few minutes of the real clock.
WINDOW, LATENESS = 20, 5
BUCKET_TOKENS = {"0-127": 60, "128-511": 300, "512-2047": 1000, "2048+": 3000}
NAMES = ("canary_task", "steady_task", "broken_task")


def config(name: str) -> dict[str, Any]:
    return {
        "task": name,
        "comparator": {"kind": "label", "labels": ["refund", "exchange"]},
        "window_seconds": WINDOW,
        "allowed_lateness_seconds": LATENESS,
        "rollback": {
            "min_samples": 50,
            "rules": [{"metric": "agreement", "op": ">=", "threshold": 0.9, "scope": "per_bucket"}],
        },
        "promotion": {"canary_steps": [50]},
    }


def store_config_version(
    engine: Engine, name: str, changes: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    """Make the task's current config its current document with `changes`, a new version
    written straight into the database, as another release (older, or newer and rolled
    back) would have stored it; its version and document."""
    with session_scope(engine) as session:
        task = session.scalars(select(Task).where(Task.name == name)).one()
        current = session.scalars(
            select(TaskConfigVersion).where(
                TaskConfigVersion.task_id == task.id,
                TaskConfigVersion.version == task.config_version,
            )
        ).one()
        document = {**current.config, **changes}
        task.config_version += 1
        session.add(
            TaskConfigVersion(
                task_id=task.id,
                version=task.config_version,
                config=document,
                config_hash=f"{task.config_version:064d}",
                created_by="another release",
            )
        )
        return task.config_version, document


def store_broken_config(engine: Engine, name: str) -> int:
    """Make the task's current config one stored before the bounds existed (a lateness of
    10**12 s), as an older release would have stored it."""
    return store_config_version(engine, name, {"allowed_lateness_seconds": 10**12})[0]


def task_ids(engine: Engine) -> dict[str, int]:
    with session_scope(engine) as session:
        return {name: tid for tid, name in session.execute(select(Task.id, Task.name))}


def stage(api: Api, name: str) -> str:
    return str(api.client.get(f"/v1/tasks/{name}", headers=api.headers("read")).json()["stage"])


def window_results(
    task: str, start: datetime, k: int, long_conflicts: float
) -> list[dict[str, Any]]:
    """60 results per length bucket in window k; `long_conflicts` of the 2048+ ones disagree."""
    out = []
    for bucket, tokens in BUCKET_TOKENS.items():
        conflicts = round(60 * (long_conflicts if bucket == "2048+" else 0.02))
        for i in range(60):
            out.append(
                make_result(
                    request_id=f"{task}-{k}-{bucket}-{i}",
                    task=task,
                    ts=(start + timedelta(seconds=k * WINDOW + i * 0.25)).isoformat(),
                    input_tokens=tokens,
                    edge={"output": "exchange" if i < conflicts else "refund", "model": "small@3"},
                )
            )
    return out


def first_future_window() -> datetime:
    """The start of the next window: windows from there on start after a promotion made now."""
    now = datetime.now(UTC)
    return now - timedelta(seconds=now.timestamp() % WINDOW) + timedelta(seconds=WINDOW)


def broken_flag(api: Api) -> dict[str, Any]:
    answer = api.client.get("/v1/flags/broken_task", headers=api.headers("flags:read"))
    assert answer.status_code == 200, answer.text
    flag: dict[str, Any] = answer.json()
    return flag


@pytest.fixture
def three_tasks(pg_url: str) -> Iterator[Api]:
    for api in make_api(pg_url):
        with session_scope(api.engine) as session:
            for name in NAMES:
                apply_config(session, config(name), actor="test")
        for name in NAMES:
            promoted = api.client.post(
                f"/v1/tasks/{name}/promote",
                json={"reason": "test canary", "force": True},
                headers=api.headers(),
            )
            assert promoted.status_code == 200, promoted.text
        yield api


@pytest.mark.integration
def test_a_task_whose_stored_config_no_longer_parses_does_not_stop_the_others(
    three_tasks: Api, caplog: pytest.LogCaptureFixture
) -> None:
    api = three_tasks
    ids = task_ids(api.engine)
    broken_version = store_broken_config(api.engine, "broken_task")
    # As after an upgrade: this release starts with no parsed config in memory.
    catalog._runtimes.clear()
    start = first_future_window()

    decisions = []
    for k in range(3):
        post_all(api, window_results("canary_task", start, k, long_conflicts=0.4))
        post_all(api, window_results("steady_task", start, k, long_conflicts=0.02))
        report = run_pass(api.engine, start + timedelta(seconds=(k + 1) * WINDOW + LATENESS))
        # The broken task is named at every pass, with the field its stored config breaks.
        assert [(f.task, f.stage) for f in report.failed] == [("broken_task", "plan")]
        assert report.failed[0].error.startswith(
            f"stored config version {broken_version} does not parse: allowed_lateness_seconds: "
            "Input should be less than or equal to 604800"
        )
        closed = {(c.task_id, c.window_start) for c in report.windows if c.action == "closed"}
        window = start + timedelta(seconds=k * WINDOW)
        assert {(ids["canary_task"], window), (ids["steady_task"], window)} <= closed
        assert all(c.task_id != ids["broken_task"] for c in report.windows)
        decisions += report.decisions
        assert stage(api, "canary_task") == ("canary" if k < 2 else "rolled_back"), k
        # No rule judges the broken task's edge: its flag routes to the cloud, stage kept.
        flag = broken_flag(api)
        assert (flag["stage"], flag["killed"], flag["edge_percent"]) == ("canary", True, 0), flag

    assert [(d["task"], d["action"], d["bucket"]) for d in decisions] == [
        ("canary_task", "rollback", "2048+")
    ]
    assert stage(api, "steady_task") == "canary"
    logged = [r for r in caplog.records if "broken_task" in r.getMessage()]
    assert logged and logged[0].exc_info is not None and logged[0].levelno == logging.ERROR

    # Once a valid config is applied, the next pass plans and closes the task's windows.
    with session_scope(api.engine) as session:
        assert apply_config(session, config("broken_task"), actor="test").version == 3
    time.sleep(1.1)  # which config version is current is re-read every second
    report = run_pass(api.engine, start + timedelta(seconds=4 * WINDOW + LATENESS))
    assert report.failed == []
    assert any(c.task_id == ids["broken_task"] and c.action == "closed" for c in report.windows)
    flag = broken_flag(api)  # its stage's flag again
    assert (flag["stage"], flag["killed"]) == ("canary", False) and flag["edge_percent"] > 0, flag
    with session_scope(api.engine) as session:
        rollbacks = session.scalars(select(Decision.task_id).where(Decision.action == "rollback"))
        assert list(rollbacks) == [ids["canary_task"]]


def test_a_task_whose_alerts_or_rollout_fail_does_not_stop_the_others(
    api: Api, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    ids = task_ids(api.engine)
    assert set(ids) == {"ticket_classify", "invoice_extract"}
    with session_scope(api.engine) as session:
        apply_config(session, {**config("third_task"), "stage": "shadow"}, actor="test")
    ids = task_ids(api.engine)
    alerts_for: list[int] = []
    rollout_for: list[int] = []
    real_alerts, real_rollout = scheduler.evaluate, scheduler.evaluate_rollout

    def evaluate(session: Any, task_id: int) -> Any:
        alerts_for.append(task_id)
        if task_id == ids["ticket_classify"]:
            raise RuntimeError("an alert rule's bug")
        return real_alerts(session, task_id=task_id)

    def evaluate_rollout(session: Any, task_id: int, now: datetime, **settings: Any) -> Any:
        rollout_for.append(task_id)
        if task_id == ids["invoice_extract"]:
            raise RuntimeError("a rollout rule's bug")
        return real_rollout(session, task_id=task_id, now=now, **settings)

    monkeypatch.setattr(scheduler, "evaluate", evaluate)
    monkeypatch.setattr(scheduler, "evaluate_rollout", evaluate_rollout)
    report = run_pass(api.engine, datetime.now(UTC) + timedelta(minutes=10))
    everyone = sorted(ids.values())
    # Every task's alerts and rollout rules were evaluated: the failing task's other stage too.
    assert sorted(alerts_for) == everyone and sorted(rollout_for) == everyone
    assert [(f.task, f.stage, f.error) for f in report.failed] == [
        ("ticket_classify", "alerts", "RuntimeError: an alert rule's bug"),
        ("invoice_extract", "rollout", "RuntimeError: a rollout rule's bug"),
    ]
    assert report.windows and {c.task_id for c in report.windows} == set(everyone)
    messages = [r.getMessage() for r in caplog.records if r.exc_info]
    assert "task ticket_classify: alert evaluation failed" in messages
    assert "task invoice_extract: rollout evaluation failed" in messages


def test_planning_is_per_task_and_the_celery_plan_queues_the_healthy_tasks(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shadowplane_workers.jobs

    ids = task_ids(api.engine)
    real = service._recent_jobs

    def recent_jobs(task: Task, rt: Any, now: datetime) -> list[service.WindowJob]:
        if task.name == "ticket_classify":
            raise OverflowError("date value out of range")
        return real(task, rt, now)

    monkeypatch.setattr(service, "_recent_jobs", recent_jobs)
    now = datetime.now(UTC) + timedelta(minutes=20)
    with session_scope(api.engine) as session:
        planned = service.plan(session, now)
    assert {j.task_id for j in planned.jobs} == {ids["invoice_extract"]}
    assert [str(f) for f in planned.failed] == [
        "task ticket_classify plan: OverflowError: date value out of range"
    ]

    queued: list[tuple[Any, ...]] = []
    monkeypatch.setattr(shadowplane_workers.jobs, "get_engine", lambda: api.engine)
    monkeypatch.setattr(
        shadowplane_workers.jobs.compute_window_job, "delay", lambda *a: queued.append(a)
    )
    assert shadowplane_workers.jobs.plan_windows.run(now.isoformat()) == len(queued) > 0
    assert {task_id for task_id, _, _ in queued} == {ids["invoice_extract"]}


def test_a_stored_config_that_no_longer_parses_is_logged_once_and_left_out(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    store_broken_config(api.engine, "invoice_extract")
    cache = RuntimeCache()
    names = {"ticket_classify", "invoice_extract"}
    for _ in range(2):
        with session_scope(api.engine) as session:
            healthy, broken = cache.load(session, names)
            assert set(cache.runtimes(session, names)) == {"ticket_classify"}
        assert set(healthy) == {"ticket_classify"}
        assert broken == {
            "invoice_extract": "stored config version 2 does not parse: allowed_lateness_seconds: "
            "Input should be less than or equal to 604800 (got 1000000000000)"
        }
    logged = [r for r in caplog.records if "invoice_extract" in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None
    # Ingest refuses the broken task's items alone; the rest of the batch is stored.
    response = api.post_results(
        {
            "results": [
                make_result(request_id="ok-1", ts=datetime.now(UTC).isoformat()),
                make_result(
                    request_id="broken-1", task="invoice_extract", ts=datetime.now(UTC).isoformat()
                ),
            ]
        }
    )
    assert response.status_code == 200, response.text
    assert [r["request_id"] for r in response.json()["rejected"]] == ["broken-1"]
