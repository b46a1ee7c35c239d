"""A real Celery worker on the real Redis broker delivers the outbox: queued by the kick a
commit sends, and by the beat entry."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from controlplane.client import verify_signature
from controlplane.db import get_engine, session_scope
from controlplane.notify.delivery import JOB_QUEUE, add_kicker, celery_kicker
from controlplane.notify.outbox import add_event
from controlplane.settings import Settings
from tests.notify.conftest import SECRET, clean_env
from tests.notify.receiver import Receiver
from tests.workers.test_celery_worker import redis_url

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def worker(pg_url: str, receiver: Receiver, tmp_path: Path) -> Iterator[Path]:
    """A worker with webhook settings; yields the path of its log."""
    broker = redis_url()
    redis.Redis.from_url(broker).flushdb()
    env = clean_env(
        SHADOWPLANE_DATABASE_URL=pg_url,
        SHADOWPLANE_REDIS_URL=broker,
        SHADOWPLANE_WEBHOOK_URLS=receiver.url,
        SHADOWPLANE_WEBHOOK_SECRET=SECRET,
    )
    path = tmp_path / "worker.log"
    log = path.open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "controlplane.cli", "worker", "--concurrency", "2"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    yield path
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    log.close()


def _event(url: str, n: int) -> int:
    with session_scope(get_engine(url)) as session:
        return add_event(
            session,
            kind="decision",
            task="ticket_classify",
            document={"kind": "decision", "task": "ticket_classify", "action": "rollback", "n": n},
        )


def test_a_worker_delivers_events_kicked_by_the_commit_and_queued_by_beat(
    pg_url: str, receiver: Receiver, worker: Path
) -> None:
    from workers.app import QUEUE, make_celery
    from workers.schedule import beat_schedule

    assert JOB_QUEUE == QUEUE  # the kick lands on the queue the workers consume
    # What the API registers with Redis configured: a commit that wrote events queues the job.
    remove = add_kicker(celery_kicker(redis_url()))
    try:
        first = _event(pg_url, 1)
        got = receiver.wait(1, timeout=90)
    finally:
        remove()
    assert len(got) == 1, worker.read_text()[-3000:]
    assert verify_signature(SECRET, got[0].headers, got[0].body)
    assert got[0].document["event_id"] == first

    # No kicker now: the event waits for the beat entry's job.
    second = _event(pg_url, 2)
    settings = Settings(database_url=pg_url, redis_url=redis_url())
    entry = beat_schedule(settings)["deliver-webhooks"]
    celery = make_celery(settings)
    celery.send_task(entry["task"])
    got = receiver.wait(2, timeout=90)
    celery.close()
    assert len(got) == 2, worker.read_text()[-3000:]
    assert got[1].document["event_id"] == second
    assert verify_signature(SECRET, got[1].headers, got[1].body)
    assert len({r.delivery_id for r in got}) == 2
    # Sent by the worker's job (this process runs no delivery at all).
    assert "webhooks.deliver_pending" in worker.read_text()
