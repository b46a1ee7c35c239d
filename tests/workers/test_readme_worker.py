"""README, "The text reader": "Each API process and worker logs which reader it runs at
startup (`"text_reader": "native"`)". A real `shadowplane worker` on the real Redis broker:
its output names the reader its process runs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from controlplane.compare import native
from controlplane.settings import Settings
from tests.liveapi import WAIT
from workers.app import make_celery

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def broker_url() -> str:
    url = os.environ.get("SHADOWPLANE_TEST_REDIS_URL")
    if not url:
        pytest.fail("SHADOWPLANE_TEST_REDIS_URL is not set: run the suite with scripts/test")
    return url.rsplit("/", 1)[0] + "/7"  # a database of its own: no other test's workers


def test_a_worker_logs_which_text_reader_it_runs_at_startup(pg_url: str, tmp_path: Path) -> None:
    broker = broker_url()
    redis.Redis.from_url(broker).flushdb()
    env = {**os.environ, "SHADOWPLANE_DATABASE_URL": pg_url, "SHADOWPLANE_REDIS_URL": broker}
    log_path = tmp_path / "worker.log"
    argv = [sys.executable, "-m", "controlplane.cli", "worker", "--concurrency", "1"]
    celery = make_celery(Settings(database_url=pg_url, redis_url=broker))
    with log_path.open("w") as log:
        process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + WAIT
            answered = False
            while time.monotonic() < deadline and not answered:
                assert process.poll() is None, log_path.read_text()[-2000:]
                answered = bool(celery.control.ping(timeout=1.0))
            assert answered, log_path.read_text()[-2000:]
            # The line is written by the worker's process as it starts: read until it shows.
            which = "native" if native.ACTIVE else "python"
            while time.monotonic() < deadline:
                if f'"text_reader": "{which}"' in log_path.read_text():
                    break
                time.sleep(0.2)
            output = log_path.read_text()
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            celery.close()
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
