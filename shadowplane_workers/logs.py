"""Logging of the Celery processes (worker and beat), in the API's JSON lines.

Celery leaves the process's logging to us (`setup_logging`). Its connection errors while
Redis is away (the consumer's "Cannot connect", beat's "Couldn't apply scheduled task", each
with a traceback) are read as one outage (controlplane.logs): one WARNING when it starts, one
when the broker answers again. The webhook poll's chatter (beat sending it every second, its
run) and each job's receipt are kept at DEBUG; the plan's tick and each window computed stay
at INFO.
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime
from typing import Any

import orjson
from celery import Celery, bootsteps
from celery.app.trace import LOG_RECEIVED, LOG_SUCCESS
from celery.signals import (
    after_task_publish,
    setup_logging,
    task_retry,
    worker_process_init,
)

from controlplane.logs import OUTAGES, REDIS, JsonLines, configure_process, noticed
from controlplane.notify.delivery import DELIVER_JOB

# Jobs beat queues every second whatever there is to do: their sending and success are
# DEBUG (a failure stays ERROR); what a pass delivers is logged by the pass.
POLLS = frozenset({DELIVER_JOB})
# Celery's advice, at each broker connection loss, about a default of Celery 6.
_CELERY6_ADVICE = "worker_cancel_long_running_tasks_on_connection_loss"
# The level `configure` set, read by `say` (a signal handler takes no logging lock).
_level = logging.INFO


def periodic(record: logging.LogRecord) -> bool:
    """Whether a record is the polls' chatter, kept at DEBUG."""
    if record.msg == LOG_RECEIVED:
        return True  # every job: its success or failure says the rest
    if record.msg == LOG_SUCCESS:
        data = getattr(record, "data", None)
        return isinstance(data, dict) and data.get("name") in POLLS
    if not isinstance(record.msg, str):
        return False
    if record.name == "celery.beat" and record.msg.startswith("Scheduler: Sending due task"):
        return isinstance(record.args, tuple) and record.args[-1:] == (DELIVER_JOB,)
    if record.msg.startswith("Discarding revoked task"):
        return True  # a job past its expiry (a poll, a plan): the next one is queued
    return record.name == "py.warnings" and _CELERY6_ADVICE in record.getMessage()


def configure(level: str | int) -> None:
    """This process's logging: JSON lines at `level`, the polls' chatter at DEBUG."""
    global _level
    handler = configure_process(
        logging.getLevelName(level) if isinstance(level, int) else level, demote=periodic
    )
    _level = handler.level
    # The pool's own logger ("Process ... exited with ...") does not pass its records on.
    pool = logging.getLogger("multiprocessing")
    for old in [h for h in pool.handlers if isinstance(h, JsonLines)]:
        pool.removeHandler(old)
    pool.addHandler(handler)
    pool.propagate = False


@setup_logging.connect
def _json_lines(loglevel: str | int | None = None, **_: Any) -> None:
    # Connected: Celery configures no logging of its own (no root hijack, no redirection).
    configure(loglevel or logging.getLogger().level or logging.INFO)


@worker_process_init.connect
def _fresh_outages(**_: Any) -> None:
    # A pool process starts with no outage of its own to report.
    for outage in OUTAGES.values():
        outage.reset()


@after_task_publish.connect
def _broker_answered(**_: Any) -> None:
    REDIS.answered()


@task_retry.connect
def _retried(reason: Any = None, **_: Any) -> None:
    cause = getattr(reason, "exc", None)
    if isinstance(cause, BaseException):
        noticed(cause)


class BrokerAnswered(bootsteps.StartStopStep):
    """A step of the worker's consumer: each time it has (re)connected to the broker, the
    Redis outage, if any, is over."""

    requires = ("celery.worker.consumer.connection:Connection",)

    def start(self, parent: Any) -> None:
        REDIS.answered()


def install(app: Celery) -> None:
    app.steps["consumer"].add(BrokerAnswered)


def say(msg: str, f: Any = None) -> None:
    """Celery's words from its signal handlers ("worker: Warm shutdown"), one JSON line at
    INFO written at once as Celery's own `safe_say` writes them (no logging lock taken inside
    a signal handler), when the process logs INFO."""
    if _level > logging.INFO:
        return
    line = {
        "ts": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "level": "INFO",
        "logger": "celery.apps.worker",
        "pid": os.getpid(),
        "message": msg.strip(),
    }
    os.write(2, orjson.dumps(line) + b"\n")
