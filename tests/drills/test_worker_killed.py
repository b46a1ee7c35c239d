"""Drill: a Celery worker SIGKILLed while it computes a window. The test holds a lock the
computation needs, so the kill lands inside it; then the lock goes and the workers carry
on.

When only the pool process dies, its worker gives the job back at once (acks late, requeued
when its worker is lost). When the whole worker dies (its main process too, as with a lost
host), nobody is left to give it back: the job stays in Redis's unacknowledged set, counted
by `shadowplane queue`, until its visibility timeout passes (a little over twice
SHADOWPLANE_JOB_TIME_LIMIT_SECONDS); then a running worker puts it back in the queue and
runs it. Either way the windows close: one row per window and bucket, and one rollback
decision."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import Connection, text

from controlplane.db import session_scope
from controlplane.rollout.configs import apply_config
from shadowplane_workers.app import QUEUE, make_celery
from shadowplane_workers.schedule import PLAN_JOB
from tests.conftest import Api, make_api
from tests.drills.servers import PgServer, poll, waiting_on_lock
from tests.liveapi import ROOT, WAIT, RedisServer
from tests.rollout.test_rollback_e2e import HIGH, LATENESS, WINDOW, config, promote, window_results
from tests.support import CeleryProcess, celery_env
from tests.windowdata import post_all

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


def held_job(broker: redis.Redis) -> str:
    """The id of the one job a worker has taken and not acknowledged (kombu keeps it in the
    `unacked` hash until the worker acknowledges it)."""
    held = broker.hvals("unacked")
    assert len(held) == 1, held
    message, _exchange, _routing_key = json.loads(held[0])
    return str(message["headers"]["id"])


def queue_check(env: dict[str, str]) -> str:
    """What the runbook's `shadowplane queue` prints, run as an operator runs it."""
    done = subprocess.run(
        [sys.executable, "-m", "controlplane.cli", "queue"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_whole_worker_killed_mid_window_its_job_comes_back_after_the_visibility_timeout(
    own_pg: PgServer, own_redis: RedisServer, api: Api, tmp_path: Path
) -> None:
    """Issue 29's finding: a worker SIGKILLed (main process and pool) inside a window job
    left that job unacknowledged in Redis for the visibility timeout, invisible to a queue
    check that read LLEN. No beat runs here and no plan is sent after the kill, so the
    killed job's window closes only if the job itself comes back: a running worker gives it
    back to the queue once the visibility timeout has passed, and runs it."""
    start = canary_windows(api)
    env = celery_env(
        own_pg.url,
        own_redis.url,
        SHADOWPLANE_TICK_SECONDS="1",
        # Window jobs may run 2 s, a retry waits at most 2 s, a delivery pass 2 + 2 * 1 s:
        # the visibility timeout is 2 + 2 + 5 = 9 s.
        SHADOWPLANE_JOB_TIME_LIMIT_SECONDS="2",
        SHADOWPLANE_WEBHOOK_TIMEOUT_SECONDS="1",
    )
    first = CeleryProcess(["worker", "--concurrency", "1"], env, tmp_path / "first.log").start()
    # DEBUG: Celery logs each job's id as it succeeds, whatever level it gives the line.
    second = CeleryProcess(
        ["worker", "--concurrency", "1", "--loglevel", "DEBUG"], env, tmp_path / "second.log"
    )
    locker = own_pg.admin().connect()
    celery = make_celery(
        api.client.app.state.settings.model_copy(update={"redis_url": own_redis.url})
    )
    broker = redis.Redis.from_url(own_redis.url)
    try:
        stopped_in_a_window(own_pg, locker, celery, start)
        killed = held_job(broker)
        first.kill()  # the main process and its pool process, at once
        locker.execute(text("ROLLBACK"))
        # Nobody is left to requeue it: it is not in the queue, whose length the runbook's
        # check once read alone; the check counts the jobs taken and not acknowledged too.
        queued = broker.llen(QUEUE)
        assert killed.encode() not in b"".join(broker.lrange(QUEUE, 0, -1))
        assert queue_check(env).startswith(
            f"{queued + 1} jobs: {queued} queued, 1 taken by a worker and not acknowledged"
        )
        second.start()
        # Back within the timeout plus a tick (9 + 1 s); the deadline is only generous.
        poll(
            lambda: state(own_pg)["closed"] == WINDOWS and state(own_pg)["stage"] == "rolled_back",
            "the killed job's window closed and the canary rolled back",
            timeout=60,
        )
        poll(
            lambda: f"metrics.compute_window[{killed}] succeeded" in second.log(tail=10**7),
            "the killed job run by the second worker",
        )
        poll(
            lambda: broker.llen(QUEUE) == 0 and broker.hlen("unacked") == 0,
            "every job run and acknowledged",
        )
    except BaseException:
        print("--- first worker ---\n" + first.log() + "\n--- second worker ---\n" + second.log())
        raise
    finally:
        locker.close()
        first.kill()
        second.stop()
        celery.close()
        broker.close()
    final = state(own_pg)
    assert final["windows"] == WINDOWS and final["doubled"] == 0, final
    assert final["decisions"] == ["rollback"], final
