"""The daily grading: a beat entry once a day whose job a real Celery worker runs, and the
in-process scheduler of the embedded mode; each keeps today's grade for every task."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import date, datetime, timedelta

import pytest
from sqlalchemy import Engine, select

from controlplane.catalog.service import apply_config
from controlplane.db import get_engine, session_scope
from controlplane.models import Task, TaskGrade
from controlplane.models.base import utcnow
from controlplane.scheduler import InProcessScheduler
from controlplane.settings import Settings
from tests.fixtures import StartWorker
from tests.grading.test_service import GRADED, Row, add_windows, register
from tests.liveapi import WAIT


def two_tasks(engine: Engine, now: datetime) -> int:
    """`graded_task` with 12 hours of windows before `now`, and `quiet_task` without; the
    results the first holds."""
    task_id = register(engine, GRADED, versions={1: now - timedelta(days=30)})
    rows = [
        Row(now - timedelta(hours=h), 1, n=40 + h, p50=100.0, p95=300.0, tokens=4000.0)
        for h in range(1, 13)
    ]
    add_windows(engine, task_id, rows)
    with session_scope(engine) as session:
        apply_config(session, {**GRADED, "task": "quiet_task"}, actor="test")
    return sum(r.n for r in rows)


def kept(engine: Engine) -> dict[str, tuple[date, dict]]:
    with session_scope(engine) as session:
        rows = session.execute(select(Task.name, TaskGrade.day, TaskGrade.document).join(Task))
        return {name: (day, document) for name, day, document in rows}


def wait_for_grades(engine: Engine, names: set[str], why: Callable[[], str]) -> None:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline and set(kept(engine)) != names:
        time.sleep(0.2)
    if set(kept(engine)) != names:
        pytest.fail(f"no grade kept for {names - set(kept(engine))}:\n{why()}")


def test_beat_queues_the_grading_once_a_day() -> None:
    from shadowplane_workers.jobs import grade_tasks
    from shadowplane_workers.schedule import GRADE_JOB, beat_schedule

    entry = beat_schedule(Settings(database_url="sqlite://"))["grade-tasks"]
    assert entry["task"] == GRADE_JOB == grade_tasks.name
    daily = entry["schedule"]
    assert (daily.minute, daily.hour) == ({15}, {0})
    assert daily.day_of_week == set(range(7)) and daily.day_of_month == set(range(1, 32))
    assert daily.month_of_year == set(range(1, 13))


@pytest.mark.integration
def test_a_worker_runs_the_grading_job_and_keeps_a_grade_per_task(
    pg_url: str, redis_url: Callable[[], str], celery_worker: StartWorker
) -> None:
    from shadowplane_workers.app import make_celery
    from shadowplane_workers.schedule import beat_schedule

    engine = get_engine(pg_url)
    now = datetime(2026, 12, 10, 0, 15, tzinfo=utcnow().tzinfo)
    results = two_tasks(engine, now)
    worker = celery_worker(pg_url, redis_url())
    settings = Settings(database_url=pg_url, redis_url=worker.redis_url)
    celery = make_celery(settings)
    # What beat does once a day: send the entry's job (the clock given, for a fixed day).
    celery.send_task(
        beat_schedule(settings)["grade-tasks"]["task"], kwargs={"now": now.isoformat()}
    )
    wait_for_grades(engine, {"graded_task", "quiet_task"}, lambda: worker.log(3000))
    celery.close()
    grades = kept(engine)
    assert {name: day for name, (day, _) in grades.items()} == {
        "graded_task": now.date(),
        "quiet_task": now.date(),
    }
    assert grades["graded_task"][1]["span"]["results"] == results
    assert grades["quiet_task"][1]["span"]["results"] == 0


def test_the_in_process_scheduler_grades_every_task_once_a_day(db_url: str) -> None:
    engine = get_engine(db_url)
    now = utcnow()
    results = two_tasks(engine, now)
    scheduler = InProcessScheduler(engine, 3600, veto=0.7)
    scheduler.start()
    try:
        wait_for_grades(engine, {"graded_task", "quiet_task"}, lambda: "")
    finally:
        scheduler.stop()
    grades = kept(engine)
    assert {day for day, _ in grades.values()} <= {now.date(), utcnow().date()}
    assert scheduler.graded_day == grades["graded_task"][0]
    assert [g["task"] for g in scheduler.grades] == ["graded_task", "quiet_task"]
    assert grades["graded_task"][1]["span"]["results"] == results
