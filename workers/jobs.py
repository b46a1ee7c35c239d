"""Thin jobs: open a transaction, call a controlplane function, queue what follows."""

from __future__ import annotations

import logging
from datetime import datetime
from functools import partial

import httpx
import psycopg
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from controlplane.alerts.service import evaluate
from controlplane.db import get_engine, in_transaction
from controlplane.metrics.service import compute_window, plan
from controlplane.models.base import utcnow
from controlplane.rollout.service import evaluate_rollout
from controlplane.rollout.webhooks import Notifier, WebhookFailed, deliver
from controlplane.settings import get_settings
from workers.app import app
from workers.schedule import PLAN_JOB

log = logging.getLogger("shadowplane.jobs")
# The database is unreachable or overloaded: try again later. Anything else is a bug or
# bad data, and retrying would only repeat it.
TRANSIENT = (OperationalError, PoolTimeout, psycopg.OperationalError)
RETRY = {
    "autoretry_for": TRANSIENT,
    "retry_backoff": True,
    "retry_backoff_max": 60,
    "max_retries": 8,
}


def _clock(now: str | None) -> datetime:
    return datetime.fromisoformat(now) if now else utcnow()


@app.task(name=PLAN_JOB, **RETRY)
def plan_windows(now: str | None = None) -> int:
    """Queue one compute job per (task, window) that is due or has new results."""
    clock = _clock(now)
    planned = in_transaction(get_engine(), lambda session: plan(session, clock))
    # The tasks that could not be planned are logged by `plan` and tried again next time.
    for failure in planned.failed:
        log.warning("not planned: %s", failure)
    for job in planned.jobs:
        compute_window_job.delay(job.task_id, job.window_start.isoformat(), clock.isoformat())
    return len(planned.jobs)


@app.task(name="metrics.compute_window", **RETRY)
def compute_window_job(task_id: int, window_start: str, now: str | None = None) -> str:
    """Compute one window; once it is closed, evaluate the task's alerts, then its rollout rules.

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
    if computed.action not in ("closed", "late"):
        return computed.action
    notifier = Notifier(get_settings())
    failures: list[Exception] = []
    # Alerts and rollout rules apart: a failure of one must not keep the other from acting.
    try:
        events = in_transaction(engine, partial(evaluate, task_id=task_id))
    except Exception as exc:
        log.exception("task %s: alert evaluation failed", task_id)
        failures.append(exc)
    else:
        for event in events:
            log.warning("alert %s %s: %s", event.change, event.kind, event.message)
        notifier.alerts(events)
    try:
        outcome = in_transaction(engine, partial(evaluate_rollout, task_id=task_id, now=clock))
    except Exception as exc:
        log.exception("task %s: rollout evaluation failed", task_id)
        failures.append(exc)
    else:
        for decision in outcome.decisions:
            log.warning(
                "decision %s on %s: %s", decision["action"], decision["task"], decision["reason"]
            )
        notifier.decisions(outcome.decisions)
        notifier.announce(outcome.notices)
    if failures:
        # A transient error retries the job, which finds the window closed and evaluates it.
        raise failures[0]
    return computed.action


@app.task(
    name="webhooks.deliver",
    autoretry_for=(httpx.HTTPError, WebhookFailed),
    retry_backoff=True,
    retry_backoff_max=300,
    max_retries=10,
)
def deliver_webhook(url: str, body: str) -> None:
    """POST one signed document; retried with backoff, logged when it finally fails."""
    deliver(url, body.encode(), get_settings().webhook_secret)
