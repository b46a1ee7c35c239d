"""The Celery app. Broker: Redis (`SHADOWPLANE_REDIS_URL`); no result backend is needed.

Jobs are acknowledged after they run (`acks_late`). A job whose pool process dies is given
back at once (`reject_on_worker_lost`). A job whose whole worker dies stays in Redis's
unacknowledged set until its visibility timeout passes, then any running worker gives it
back to the queue (each looks every tick) and it runs again. The timeout is a little over
the longest a job may stay unacknowledged (`job_limits`), so a lost job comes back within
minutes; every job is idempotent, so one that does run twice is harmless.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from celery import Celery
from celery.signals import beat_init, worker_process_init

from controlplane.compare import native
from controlplane.settings import Settings, get_settings
from shadowplane_workers import logs
from shadowplane_workers.schedule import beat_schedule

QUEUE = "shadowplane"
# The longest a retry of a job waits (its backoff's cap), when the time limit is longer.
RETRY_WAIT_MAX = 60
# Past the longest a job may stay unacknowledged, for the hard time limit's kill and the
# acknowledgement to land, and for clocks of worker hosts that differ by a little.
VISIBILITY_MARGIN = 5.0
# Daily grading may run longer than a window job; it is acknowledged when it starts, so its
# run never counts against the visibility timeout (a grading lost with its worker is done
# again the next day, and on demand by promotion and the grade endpoints).
GRADE_TIME_LIMIT = 600.0
# Beat's publish to a Redis that stops answering without closing its connections (frozen,
# a failover, a dropped NAT entry) waits at most this long, and is not retried: it then
# fails, beat logs `redis_unavailable` once, and `redis_available` at its first publish
# after; the next tick publishes again. Without it the publish waited for good: no plan
# queued, nothing logged. Long enough that a Redis merely slow for a few seconds answers
# in time (a publish given up on may still be queued when Redis wakes, and retried it
# would be queued twice). Beat only: a worker's commands wait as before (an ack that timed
# out left kombu holding the job's prefetch slot, and the worker took no job again).
BEAT_SOCKET_TIMEOUT = 10.0


@dataclass(frozen=True)
class JobLimits:
    """How long jobs may run and wait, in seconds, and the visibility timeout they imply."""

    # The hard time limit of the window, plan and partition jobs; a delivery pass starts no
    # send after it.
    run: float
    # The longest wait before a retry (transient database errors).
    retry_wait: int
    # The hard time limit of a delivery pass: `run`, then one last send.
    delivery: float
    # An unacknowledged job is given back to the queue after this long.
    visibility: float


def job_limits(settings: Settings) -> JobLimits:
    """The limits `SHADOWPLANE_JOB_TIME_LIMIT_SECONDS` sets. A job is unacknowledged from the
    moment a worker takes it until it ends: a retried job for its wait and its run, a
    delivery pass for its run. The visibility timeout is a little over the longest of them,
    so a job still waiting or running is never given to a second worker."""
    run = settings.job_time_limit_seconds
    retry_wait = min(RETRY_WAIT_MAX, math.ceil(run))
    # An answer may take the receiver's timeout to connect and as long again to arrive.
    delivery = run + 2 * settings.webhook_timeout_seconds
    return JobLimits(
        run=run,
        retry_wait=retry_wait,
        delivery=delivery,
        visibility=max(run + retry_wait, delivery) + VISIBILITY_MARGIN,
    )


def make_celery(settings: Settings) -> Celery:
    limits = job_limits(settings)
    # Beat's period for the plan (shadowplane_workers/schedule.py).
    tick = settings.tick_seconds or 10.0
    app = Celery("shadowplane", broker=settings.redis_url or "redis://127.0.0.1:6379/0")
    app.conf.update(
        include=["shadowplane_workers.jobs"],
        task_default_queue=QUEUE,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        timezone="UTC",
        enable_utc=True,
        broker_connection_retry_on_startup=True,
        # A job running longer than this is killed (its pool process replaced) and acknowledged
        # as failed, not delivered again: the beat's next plans queue its window again.
        task_time_limit=limits.run,
        broker_transport_options={
            "visibility_timeout": limits.visibility,
            # Every worker gives the jobs held past the timeout back to the queue at start and
            # then every tick (kombu's default: every 100 s; 10-s calls, 1 in 10 looking).
            "unacked_restore_interval": tick,
            "unacked_restore_throttle": 1,
            # The lock of one such pass: a worker that dies holding it blocks the others for
            # this long, not kombu's 5 minutes.
            "unacked_mutex_expire": tick,
        },
        beat_schedule=beat_schedule(settings),
        worker_hijack_root_logger=False,
    )
    logs.install(app)
    return app


app = make_celery(get_settings())


@beat_init.connect
def _beat_gives_up_on_a_silent_redis(sender: Any = None, **_: Any) -> None:
    """In beat (before its first publish opens the broker's connection): each publish waits
    at most BEAT_SOCKET_TIMEOUT for Redis, and is not retried."""
    conf = sender.app.conf if sender is not None else app.conf
    conf.broker_transport_options = {
        **conf.broker_transport_options,
        "socket_timeout": BEAT_SOCKET_TIMEOUT,
        "socket_connect_timeout": BEAT_SOCKET_TIMEOUT,
    }
    conf.task_publish_retry = False


@worker_process_init.connect
def _fresh_connections(**_: Any) -> None:
    # A forked worker must not share the parent's pooled database connections.
    from controlplane.db import forget_engines

    forget_engines()
    logging.getLogger("shadowplane").info(
        '{"event": "worker_startup", "text_reader": "%s"} reading texts with %s',
        "native" if native.ACTIVE else "python",
        native.reader_name(),
    )
