"""A real Celery worker on the real Redis broker delivers the outbox: queued by the kick a
commit sends, and by the beat entry."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from controlplane.client import verify_signature
from controlplane.db import get_engine, session_scope
from controlplane.notify.delivery import JOB_QUEUE, add_kicker, celery_kicker
from controlplane.notify.outbox import add_event
from controlplane.settings import Settings
from tests.fixtures import StartWorker
from tests.notify.conftest import SECRET
from tests.notify.receiver import Receiver
from tests.support import CeleryProcess

pytestmark = pytest.mark.integration


@pytest.fixture
def worker(
    pg_url: str, receiver: Receiver, redis_url: Callable[[], str], celery_worker: StartWorker
) -> CeleryProcess:
    """A worker with webhook settings."""
    return celery_worker(
        pg_url,
        redis_url(),
        concurrency=2,
        SHADOWPLANE_WEBHOOK_URLS=receiver.url,
        SHADOWPLANE_WEBHOOK_SECRET=SECRET,
    )


def _event(url: str, n: int) -> int:
    with session_scope(get_engine(url)) as session:
        return add_event(
            session,
            kind="decision",
            task="ticket_classify",
            document={"kind": "decision", "task": "ticket_classify", "action": "rollback", "n": n},
        )


def test_a_worker_delivers_events_kicked_by_the_commit_and_queued_by_beat(
    pg_url: str, receiver: Receiver, worker: CeleryProcess
) -> None:
    from shadowplane_workers.app import QUEUE, make_celery
    from shadowplane_workers.schedule import beat_schedule

    assert JOB_QUEUE == QUEUE  # the kick lands on the queue the workers consume
    # What the API registers with Redis configured: a commit that wrote events queues the job.
    remove = add_kicker(celery_kicker(worker.redis_url))
    try:
        first = _event(pg_url, 1)
        got = receiver.wait(1, timeout=90)
    finally:
        remove()
    assert len(got) == 1, worker.log_path.read_text()[-3000:]
    assert verify_signature(SECRET, got[0].headers, got[0].body)
    assert got[0].document["event_id"] == first

    # No kicker now: the event waits for the beat entry's job.
    second = _event(pg_url, 2)
    settings = Settings(database_url=pg_url, redis_url=worker.redis_url)
    entry = beat_schedule(settings)["deliver-webhooks"]
    celery = make_celery(settings)
    celery.send_task(entry["task"])
    got = receiver.wait(2, timeout=90)
    celery.close()
    assert len(got) == 2, worker.log_path.read_text()[-3000:]
    assert got[1].document["event_id"] == second
    assert verify_signature(SECRET, got[1].headers, got[1].body)
    assert len({r.delivery_id for r in got}) == 2
    # Sent by the worker's job (this process runs no delivery at all).
    assert '"event":"webhook_delivered"' in worker.log_path.read_text()
