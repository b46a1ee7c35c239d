"""Which of Celery's lines are the polls' chatter (kept at DEBUG) in a worker's and beat's
log, and which stay at their level."""

from __future__ import annotations

import logging
from typing import Any

from celery.app.trace import LOG_FAILURE, LOG_RECEIVED, LOG_SUCCESS

from controlplane.notify.delivery import DELIVER_JOB
from shadowplane_workers.logs import periodic
from shadowplane_workers.schedule import PLAN_JOB

SENDING = "Scheduler: Sending due task %s (%s)"


def record(name: str, msg: str, args: Any = (), **extra: Any) -> logging.LogRecord:
    return logging.makeLogRecord({"name": name, "msg": msg, "args": args, **extra})


def job(name: str) -> dict[str, str]:
    return {"name": name, "id": "4f1c", "runtime": "0.01", "return_value": "0"}


def test_the_webhook_poll_and_receipts_are_chatter() -> None:
    assert periodic(record("celery.worker.strategy", LOG_RECEIVED, data=job(PLAN_JOB)))
    assert periodic(record("celery.app.trace", LOG_SUCCESS, data=job(DELIVER_JOB)))
    assert periodic(record("celery.beat", SENDING, ("deliver-webhooks", DELIVER_JOB)))
    assert periodic(record("celery.worker.request", "Discarding revoked task: %s[%s]"))
    advice = "consumer.py:427: CPendingDeprecationWarning: ... using the "
    advice += "worker_cancel_long_running_tasks_on_connection_loss setting."
    assert periodic(record("py.warnings", advice))


def test_the_tick_its_windows_and_every_failure_stay() -> None:
    # The plan's tick, in beat and in the worker, and each window computed: INFO.
    assert not periodic(record("celery.beat", SENDING, ("plan-windows", PLAN_JOB)))
    assert not periodic(record("celery.app.trace", LOG_SUCCESS, data=job(PLAN_JOB)))
    computed = job("metrics.compute_window")
    assert not periodic(record("celery.app.trace", LOG_SUCCESS, data=computed))
    # A failed poll is an error like any other.
    assert not periodic(record("celery.app.trace", LOG_FAILURE, data=job(DELIVER_JOB)))
    assert not periodic(record("py.warnings", "SecurityWarning: running as root"))
