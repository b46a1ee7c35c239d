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
    jobs = in_transaction(get_engine(), lambda session: plan(session, clock))
    for job in jobs:
        compute_window_job.delay(job.task_id, job.window_start.isoformat(), clock.isoformat())
    return len(jobs)


@app.task(name="metrics.compute_window", **RETRY)
def compute_window_job(task_id: int, window_start: str, now: str | None = None) -> str:
    """Compute one window; when it closes, evaluate the task's alerts, then its rollout rules."""
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
    if computed.action == "closed":
        notifier = Notifier(get_settings())
        events = in_transaction(engine, partial(evaluate, task_id=task_id))
        for event in events:
            log.warning("alert %s %s: %s", event.change, event.kind, event.message)
        outcome = in_transaction(engine, partial(evaluate_rollout, task_id=task_id, now=clock))
        for decision in outcome.decisions:
            log.warning(
                "decision %s on %s: %s", decision["action"], decision["task"], decision["reason"]
            )
        notifier.alerts(events)
        notifier.decisions(outcome.decisions)
        notifier.announce(outcome.notices)
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
