"""`no_traffic` after a promotion, on real PostgreSQL through the worker's jobs (the plan, then
`compute_window_job` per window): the rehearsal's finding was the alert opening on every
task about a minute after its promotion, before any router had fetched the new flag."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select, update

import shadowplane_workers.jobs
from controlplane.db import in_transaction, session_scope
from controlplane.metrics.service import plan
from controlplane.models import Alert, Task
from controlplane.rollout.configs import apply_config
from controlplane.settings import Settings
from tests.conftest import Api, make_api
from tests.windowdata import LATENESS, METRICS_TASK, WINDOW

pytestmark = pytest.mark.integration


@pytest.fixture
def api(pg_url: str) -> Iterator[Api]:
    """metrics_task (one-minute windows, 30 s lateness, silence after 3 windows) in `cloud`
    for an hour with no traffic, as a task is before its routers are told to send."""
    for api in make_api(pg_url):
        with session_scope(api.engine) as session:
            apply_config(session, {**METRICS_TASK, "stage": "cloud"}, actor="test")
            an_hour_ago = datetime.now(UTC) - timedelta(hours=1)
            session.execute(
                update(Task)
                .where(Task.name == "metrics_task")
                .values(created_at=an_hour_ago, stage_changed_at=an_hour_ago)
            )
        yield api


def test_no_traffic_waits_out_the_grace_after_a_promotion_then_opens(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shadowplane_workers.jobs, "get_engine", lambda: api.engine)
    monkeypatch.setattr(
        shadowplane_workers.jobs, "get_settings", lambda: Settings(database_url=api.url)
    )
    for _ in ("shadow", "canary"):
        promoted = api.client.post(
            "/v1/tasks/metrics_task/promote",
            json={"reason": "rehearsal", "force": True},
            headers=api.headers(),
        )
        assert promoted.status_code == 200, promoted.text
    with session_scope(api.engine) as session:
        task = session.scalars(select(Task).where(Task.name == "metrics_task")).one()
        task_id, stage, promoted_at = task.id, task.stage, task.stage_changed_at
    assert stage == "canary" and promoted_at is not None

    # The grace: routers on the Python client poll every 10 s, 11 s at most with the
    # jitter; then a window (60 s). Windows starting from its end on count as silent.
    grace_end = promoted_at + timedelta(seconds=11 + WINDOW)
    first_counted = _window_start(grace_end - timedelta(microseconds=1)) + timedelta(seconds=WINDOW)
    # The third silent window (silence_windows: 3) is the one the alert opens on.
    opens_on = first_counted + timedelta(seconds=2 * WINDOW)

    window = _window_start(promoted_at)  # the window the promotion fell in
    while window <= opens_on:
        clock = window + timedelta(seconds=WINDOW + LATENESS)  # when the window closes
        planned = in_transaction(api.engine, lambda session, c=clock: plan(session, c))  # type: ignore[misc]
        for job in planned.jobs:
            shadowplane_workers.jobs.compute_window_job.run(
                job.task_id, job.window_start.isoformat(), clock.isoformat()
            )
        with session_scope(api.engine) as session:
            opened = [
                a.window_start
                for a in session.scalars(
                    select(Alert).where(Alert.task_id == task_id, Alert.kind == "no_traffic")
                )
            ]
        if window < opens_on:
            assert opened == [], f"opened when the window of {window} closed"
        else:
            assert opened == [opens_on]
        window += timedelta(seconds=WINDOW)


def _window_start(at: datetime) -> datetime:
    return at - timedelta(seconds=int(at.timestamp()) % WINDOW, microseconds=at.microsecond)
