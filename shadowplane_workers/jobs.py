"""Thin jobs: open a transaction, call a controlplane function, queue what follows."""

from __future__ import annotations

import logging
from datetime import datetime
from functools import partial
from typing import Any

import psycopg
from celery.signals import worker_process_init
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from controlplane.db import get_engine, in_transaction
from controlplane.metrics.service import compute_window, plan
from controlplane.models.base import utcnow
from controlplane.models.partitions import keep_partitions
from controlplane.notify import delivery
from controlplane.notify.delivery import DELIVER_JOB
from controlplane.scheduler import (
    EVALUATED,
    after_window,
    fill_regression_sets,
    grade_every_task,
    ground,
)
from controlplane.settings import get_settings
from shadowplane_workers.app import GRADE_TIME_LIMIT, app, job_limits
from shadowplane_workers.schedule import GRADE_JOB, PARTITIONS_JOB, PLAN_JOB

log = logging.getLogger("shadowplane.jobs")
LIMITS = job_limits(get_settings())
# The database is unreachable or overloaded: try again later. Anything else is a bug or
# bad data, and retrying would only repeat it.
TRANSIENT = (OperationalError, PoolTimeout, psycopg.OperationalError)
RETRY = {
    "autoretry_for": TRANSIENT,
    "retry_backoff": True,
    # A retry waits at most this long (a minute, or the time limit when shorter), so a
    # job's wait and run stay within the visibility timeout.
    "retry_backoff_max": LIMITS.retry_wait,
    "max_retries": 8,
}


def _clock(now: str | None) -> datetime:
    return datetime.fromisoformat(now) if now else utcnow()


@app.task(name=PLAN_JOB, **RETRY)
def plan_windows(now: str | None = None) -> int:
    """Queue one compute job per (task, window) that is due or has new results; put
    labelled regression items into their eval sets."""
    clock = _clock(now)
    planned = in_transaction(get_engine(), lambda session: plan(session, clock))
    # The tasks that could not be planned are logged by `plan` and tried again next time.
    for failure in planned.failed:
        log.warning("not planned: %s", failure)
    if planned.failed:
        ground(get_engine())  # a task whose stored config does not parse: to the cloud
    for job in planned.jobs:
        compute_window_job.delay(job.task_id, job.window_start.isoformat(), clock.isoformat())
    # Labelled regression items into their eval sets, each tick (a failure is logged there
    # and tried again next tick).
    fill_regression_sets(get_engine())
    return len(planned.jobs)


@app.task(name="metrics.compute_window", **RETRY)
def compute_window_job(task_id: int, window_start: str, now: str | None = None) -> str:
    """Compute one window; once it is closed, `after_window` (alerts, rollout rules, outbox).

    A closed window is evaluated whether this job closed it or found it closed: a retry (or
    a redelivery after a lost worker) finds the window it closed already closed, and its
    evaluation must still happen. Evaluations are idempotent, so doing one again is safe.
    """
    clock = _clock(now)
    engine = get_engine()
    computed = in_transaction(
        engine,
        partial(
            compute_window,
            task_id=task_id,
            window_start=datetime.fromisoformat(window_start),
            now=clock,
        ),
    )
    if computed.action not in EVALUATED:
        return computed.action
    done = after_window(engine, task_id, clock, veto=get_settings().error_cost_veto)
    if done.errors:
        # A transient error retries the job, which finds the window closed and evaluates it.
        raise done.errors[0]
    return computed.action


@app.task(name=PARTITIONS_JOB, **RETRY)
def keep_partitions_job(now: str | None = None) -> list[str]:
    """Create the day partitions a result may arrive for (PostgreSQL; nothing on SQLite)."""
    created = keep_partitions(get_engine(), _clock(now), get_settings().max_backfill)
    for day in created.skipped:
        log.warning("day %s left to the default partition: it already holds rows of it", day)
    return [day.isoformat() for day in created.days]


# Acknowledged when it starts (shadowplane_workers/app.py, GRADE_TIME_LIMIT): a grading pass may run
# longer than the visibility timeout, and must not be given to a second worker meanwhile.
@app.task(name=GRADE_JOB, time_limit=GRADE_TIME_LIMIT, acks_late=False, **RETRY)
def grade_tasks(now: str | None = None) -> dict[str, str]:
    """Grade every task and keep today's grade (daily); by task, the tier kept."""
    graded = grade_every_task(get_engine(), _clock(now), veto=get_settings().error_cost_veto)
    return {document["task"]: document["tier"] for document in graded}


@app.task(name=DELIVER_JOB, time_limit=LIMITS.delivery)
def deliver_webhooks(now: str | None = None) -> dict[str, int]:
    """One delivery pass over the outbox (sends what is due, records it). Not retried: beat
    runs it again within seconds, and each delivery keeps its own attempts and backoff."""
    settings = get_settings()
    return delivery.deliver_pending(
        get_engine(),
        settings,
        now=datetime.fromisoformat(now) if now else None,
        budget_seconds=LIMITS.run,
    ).as_dict()


@worker_process_init.connect
def _kick_after_commits(**_: Any) -> None:
    # A commit in this worker that wrote outbox events (a policy decision, an alert) queues
    # a delivery pass at once instead of waiting for the beat.
    delivery.add_kicker(lambda: deliver_webhooks.apply_async(expires=60))
