"""The Celery app. Broker: Redis (`SHADOWPLANE_REDIS_URL`); no result backend is needed.

Jobs are acknowledged after they run (`acks_late`). A job whose pool process dies is given
back at once (`reject_on_worker_lost`); a job whose whole worker dies stays unacknowledged in
Redis and is delivered again after the visibility timeout (15 minutes), and sooner in
effect, since the beat's next plans queue the same windows again. Every job is idempotent,
so running one twice is harmless.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery
from celery.signals import worker_process_init

from controlplane.compare import native
from controlplane.settings import Settings, get_settings
from workers import logs
from workers.schedule import beat_schedule

QUEUE = "shadowplane"


def make_celery(settings: Settings) -> Celery:
    app = Celery("shadowplane", broker=settings.redis_url or "redis://127.0.0.1:6379/0")
    app.conf.update(
        include=["workers.jobs"],
        task_default_queue=QUEUE,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        timezone="UTC",
        enable_utc=True,
        broker_connection_retry_on_startup=True,
        # A job running longer than this is killed (its pool process replaced) and acknowledged
        # as failed, not delivered again: the beat's next pass queues its work again. Shorter
        # than the visibility timeout, so a job still running is never redelivered.
        task_time_limit=600,
        # An unacknowledged job (its worker gone) is delivered again after this long: longer
        # than any job may run, so a running job is never handed to a second worker.
        broker_transport_options={"visibility_timeout": 900},
        beat_schedule=beat_schedule(settings),
        worker_hijack_root_logger=False,
    )
    logs.install(app)
    return app


app = make_celery(get_settings())


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
