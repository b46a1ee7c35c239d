"""README, "The text reader": "Each API process and worker logs which reader it runs at
startup (`"text_reader": "native"`)". A real `shadowplane worker` on the real Redis broker:
its output names the reader its process runs."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from controlplane.compare import native
from controlplane.settings import Settings
from tests.fixtures import StartWorker
from tests.liveapi import WAIT

pytestmark = pytest.mark.integration


def test_a_worker_logs_which_text_reader_it_runs_at_startup(
    pg_url: str, redis_url: Callable[[], str], celery_worker: StartWorker
) -> None:
    worker = celery_worker(pg_url, redis_url())  # returns once it answers a ping
    # The line is written by the worker's process as it starts: read until it shows.
    which = "native" if native.ACTIVE else "python"
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if f'"text_reader": "{which}"' in worker.log_path.read_text():
            break
        time.sleep(0.2)
    output = worker.log_path.read_text()
    lines = [line for line in output.splitlines() if '"text_reader"' in line]
    assert lines, output[-3000:]
    assert f'"text_reader": "{which}"' in lines[0] and native.reader_name() in lines[0]


def test_beat_queues_the_passes_every_tick_and_reads_the_outbox_every_poll() -> None:
    """README, "Running it in production" and "Settings": beat queues the window work every
    `SHADOWPLANE_TICK_SECONDS` and the webhook delivery every `SHADOWPLANE_WEBHOOK_POLL_SECONDS`."""
    from workers.schedule import beat_schedule

    for tick, poll in ((10.0, 1.0), (30.0, 5.0)):
        schedule = beat_schedule(
            Settings(database_url="sqlite://", tick_seconds=tick, webhook_poll_seconds=poll)
        )
        assert schedule["plan-windows"]["schedule"] == tick
        assert schedule["deliver-webhooks"]["schedule"] == poll
