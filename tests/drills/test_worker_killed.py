"""Drill: a Celery worker SIGKILLed while it computes a window. The test holds a lock the
computation needs, so the kill lands inside it; then the lock goes and the workers carry
on. The killed job is redelivered (acks late, requeued when its worker is lost) and the
windows close: one row per window and bucket, and one rollback decision.

When the whole worker dies (its main process too, as with a lost host), nobody is left to
requeue the job: the broker keeps it unacknowledged until its visibility timeout (an hour,
Redis's default) and the beat's next plans queue the unclosed windows again, for the next
worker to close."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import Connection, text

from controlplane.db import session_scope
from controlplane.rollout.configs import apply_config
from tests.conftest import Api, make_api
from tests.drills.servers import PgServer, poll, waiting_on_lock
from tests.liveapi import RedisServer
from tests.rollout.test_rollback_e2e import HIGH, LATENESS, WINDOW, config, promote, window_results
from tests.support import CeleryProcess, celery_env
from tests.windowdata import post_all
from workers.app import make_celery
from workers.schedule import PLAN_JOB

pytestmark = [pytest.mark.integration, pytest.mark.drills]
TASK = "canary_task"
WINDOWS = 3  # the canary's long bucket breaches in each: the third one rolls it back


@pytest.fixture
def api(own_pg: PgServer) -> Iterator[Api]:
    for api in make_api(own_pg.url):
        with session_scope(api.engine) as session:
            apply_config(session, config(TASK), actor="test")
        yield api


def rewind_canary(api: Api, windows: int = 8) -> datetime:
    """The start of a window `windows` windows ago, with the canary created and promoted
    then (results may lie at most 5 minutes ahead of the clock, so its windows lie in the
    past). Its first window is the first the plan queues: the job stopped and killed is
    one of the windows holding results. The other tasks keep their creation time, so the
    plan has no empty windows of theirs to queue."""
    from sqlalchemy import update

    from controlplane.models import Task

    now = datetime.now(UTC)
    start = now - timedelta(seconds=now.timestamp() % WINDOW) - timedelta(seconds=windows * WINDOW)
    with session_scope(api.engine) as session:
        session.execute(
            update(Task).where(Task.name == TASK).values(created_at=start, stage_changed_at=start)
        )
    return start


def canary_windows(api: Api) -> datetime:
    """The canary promoted, and WINDOWS windows of its results (in the past) whose long
    bucket breaches; returns the first window's start."""
    assert promote(api, TASK).status_code == 200
    start = rewind_canary(api)
    for k in range(WINDOWS):
        post_all(api, window_results(TASK, start, k, {"2048+": 0.4}, HIGH))
    return start


def stopped_in_a_window(pg: PgServer, locker: Connection, celery: Any, start: datetime) -> None:
    """A plan queued; returns once a worker is inside a window's transaction, waiting on
    the lock `locker` holds on every write of window rows (until it rolls back)."""
    locker.execute(text("BEGIN"))
    locker.execute(text("LOCK TABLE window_metrics IN EXCLUSIVE MODE"))
    now = start + timedelta(seconds=WINDOWS * WINDOW + LATENESS)
    celery.send_task(PLAN_JOB, kwargs={"now": now.isoformat()})
    engine = pg.admin()
    poll(
        lambda: waiting_on_lock(engine, "window_metrics") >= 1,
        "a worker computing a window",
        timeout=90,
    )


def state(pg: PgServer) -> dict[str, object]:
    with pg.admin().connect() as conn:
        windows = conn.execute(
            text(
                "SELECT w.window_start, w.closed_at IS NOT NULL FROM windows w "
                "JOIN tasks t ON t.id = w.task_id WHERE t.name = :task AND EXISTS "
                "(SELECT 1 FROM window_metrics m WHERE m.window_id = w.id AND m.n_results > 0)"
            ),
            {"task": TASK},
        ).all()
        per_bucket = conn.execute(
            text(
                "SELECT count(*) FROM window_metrics m JOIN windows w ON w.id = m.window_id "
                "JOIN tasks t ON t.id = w.task_id WHERE t.name = :task "
                "GROUP BY w.task_id, w.window_start, m.bucket HAVING count(*) > 1"
            ),
            {"task": TASK},
        ).all()
        decisions = conn.execute(
            text(
                "SELECT d.action FROM decisions d JOIN tasks t ON t.id = d.task_id "
                "WHERE t.name = :task AND d.actor = 'policy'"
            ),
            {"task": TASK},
        ).all()
        stage = conn.scalar(text("SELECT stage FROM tasks WHERE name = :task"), {"task": TASK})
    return {
        "closed": sorted(closed for _, closed in windows).count(True),
        "windows": len(windows),
        "doubled": len(per_bucket),
        "decisions": [d for (d,) in decisions],
        "stage": stage,
    }


def test_a_worker_killed_mid_window_leaves_the_job_to_be_redelivered(
    own_pg: PgServer, own_redis: RedisServer, api: Api, tmp_path: Path
) -> None:
    start = canary_windows(api)
    env = celery_env(own_pg.url, own_redis.url, SHADOWPLANE_LOG_LEVEL="WARNING")
    worker = CeleryProcess(["worker", "--concurrency", "1"], env, tmp_path / "worker.log").start()
    locker = own_pg.admin().connect()
    celery = make_celery(
        api.client.app.state.settings.model_copy(update={"redis_url": own_redis.url})
    )
    try:
        stopped_in_a_window(own_pg, locker, celery, start)
        children = worker.children()
        assert len(children) == 1, children
        os.kill(children[0], signal.SIGKILL)  # the pool process computing the window
        locker.execute(text("ROLLBACK"))
        # No new plan is sent: the killed job's window closes only if it is redelivered.
        poll(
            lambda: state(own_pg)["closed"] == WINDOWS and state(own_pg)["stage"] == "rolled_back",
            "the windows closed and the canary rolled back",
            timeout=90,
        )
        poll(lambda: "WorkerLostError" in worker.log(tail=10**7), "the worker to log the lost job")
    except BaseException:
        print("--- worker ---\n" + worker.log())
        raise
    finally:
        locker.close()
        worker.stop()
        celery.close()
    final = state(own_pg)
    assert final["windows"] == WINDOWS and final["doubled"] == 0, final
    assert final["decisions"] == ["rollback"], final


def test_a_whole_worker_killed_mid_window_the_next_plans_close_its_windows(
    own_pg: PgServer, own_redis: RedisServer, api: Api, tmp_path: Path
) -> None:
    start = canary_windows(api)
    env = celery_env(
        own_pg.url, own_redis.url, SHADOWPLANE_LOG_LEVEL="WARNING", SHADOWPLANE_TICK_SECONDS="1"
    )
    first = CeleryProcess(["worker", "--concurrency", "1"], env, tmp_path / "first.log").start()
    second = CeleryProcess(["worker", "--concurrency", "1"], env, tmp_path / "second.log")
    beat = CeleryProcess(
        ["beat", "--schedule-file", str(tmp_path / "beat-schedule")], env, tmp_path / "beat.log"
    )
    locker = own_pg.admin().connect()
    celery = make_celery(
        api.client.app.state.settings.model_copy(update={"redis_url": own_redis.url})
    )
    broker = redis.Redis.from_url(own_redis.url)
    try:
        stopped_in_a_window(own_pg, locker, celery, start)
        first.kill()  # the main process and its pool process, at once
        locker.execute(text("ROLLBACK"))
        # The job it held is still the broker's, unacknowledged, until its visibility
        # timeout: nothing is lost, and nothing is requeued before then.
        assert broker.hlen("unacked") >= 1
        second.start()
        beat.start()
        poll(
            lambda: state(own_pg)["closed"] == WINDOWS and state(own_pg)["stage"] == "rolled_back",
            "the windows closed and the canary rolled back",
            timeout=90,
        )
        # Beat goes on planning every second: later plans find the windows closed and
        # evaluate them again, and make no second decision.
        planned = second.log(tail=10**7).count("metrics.plan")
        poll(
            lambda: second.log(tail=10**7).count("metrics.plan") >= planned + 6,
            "three more plans run",
        )
    except BaseException:
        print("--- second worker ---\n" + second.log() + "\n--- beat ---\n" + beat.log())
        raise
    finally:
        locker.close()
        first.kill()
        second.stop()
        beat.stop()
        celery.close()
        broker.close()
    final = state(own_pg)
    assert final["windows"] == WINDOWS and final["doubled"] == 0, final
    assert final["decisions"] == ["rollback"], final
