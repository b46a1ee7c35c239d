"""A real Celery worker on the real Redis broker computes the windows the beat schedule queues."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from controlplane.compare import native
from controlplane.settings import Settings
from controlplane.sim.profiles import generate
from shadowplane_workers.app import make_celery
from shadowplane_workers.schedule import beat_schedule
from tests.conftest import Api, make_result
from tests.fixtures import StartWorker
from tests.support import CeleryProcess, celery_env
from tests.test_tick_command import assert_every_field
from tests.windowdata import LATENESS, T0, WINDOW, post_all

pytestmark = pytest.mark.integration


@pytest.fixture
def worker(pg_url: str, redis_url: Callable[[], str], celery_worker: StartWorker) -> CeleryProcess:
    """A worker of two processes on the test's database and a Redis database of its own."""
    return celery_worker(pg_url, redis_url(), concurrency=2)


def _windows(api: Api, task: str) -> list[dict[str, Any]]:
    response = api.client.get(
        f"/v1/tasks/{task}/windows",
        params={"since": T0.isoformat(), "until": (T0 + timedelta(hours=1)).isoformat()},
        headers=api.headers("read"),
    )
    assert response.status_code == 200, response.text
    return list(response.json()["windows"])


def test_the_worker_computes_and_closes_windows_queued_by_the_beat_schedule(
    pg_metrics_api: Api, worker: CeleryProcess
) -> None:
    assert pg_metrics_api.url.startswith("postgresql")
    results = generate(
        "ticket_classify",
        600,
        seed=1,
        now=T0 + timedelta(seconds=2 * WINDOW),
        span_seconds=2 * WINDOW,
    )
    post_all(pg_metrics_api, results)

    settings = Settings(database_url=pg_metrics_api.url, redis_url=worker.redis_url)
    entry = beat_schedule(settings)["plan-windows"]
    celery = make_celery(settings)
    now = T0 + timedelta(seconds=2 * WINDOW + LATENESS + 600)
    # What beat does on each tick: send the schedule entry's job to the broker. The clock is
    # given, as `shadowplane tick --now` would, so the windows close.
    celery.send_task(entry["task"], kwargs={"now": now.isoformat()})

    deadline = time.monotonic() + 120
    rows: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        rows = _windows(pg_metrics_api, "ticket_classify")
        if len(rows) == 5 and all(r["closed"] for r in rows):
            break
        if not worker.running():
            break
        time.sleep(0.5)
    if not (len(rows) == 5 and all(r["closed"] for r in rows)):
        worker.stop()
        output = worker.log_path.read_text()
        pytest.fail(
            f"windows not computed by the worker: {rows[:2]}\n--- worker ---\n{output[-4000:]}"
        )
    assert sum(r["n_results"] for r in rows if r["bucket"] == "all") == 600
    assert_every_field(rows)
    celery.close()
    # Each worker process says which text reader it runs at startup (this run's, by the same
    # choice), in words too: README, "The text reader".
    which = "native" if native.ACTIVE else "python"
    lines = [json.loads(line) for line in worker.log_path.read_text().splitlines()]
    started = [line for line in lines if line.get("event") == "worker_startup"]
    assert started and all(
        line["text_reader"] == which and native.reader_name() in line["message"] for line in started
    ), started


def test_beat_and_worker_compute_the_current_window_on_their_own(
    pg_metrics_api: Api,
    tmp_path: Path,
    redis_url: Callable[[], str],
    celery_worker: StartWorker,
) -> None:
    from datetime import UTC, datetime

    broker = redis_url()
    now = datetime.now(UTC)
    post_all(
        pg_metrics_api,
        [
            make_result(request_id=f"live-{i}", task="metrics_task", ts=now.isoformat())
            for i in range(30)
        ],
    )
    worker = celery_worker(pg_metrics_api.url, broker, SHADOWPLANE_TICK_SECONDS="1")
    beat = CeleryProcess(
        ["beat", "--schedule-file", str(tmp_path / "beat-schedule")],
        celery_env(pg_metrics_api.url, broker, SHADOWPLANE_TICK_SECONDS="1"),
        tmp_path / "beat.log",
    ).start()
    try:
        start = now - timedelta(seconds=now.timestamp() % WINDOW)
        deadline = time.monotonic() + 90
        found: list[dict[str, Any]] = []
        while time.monotonic() < deadline and not found:
            response = pg_metrics_api.client.get(
                "/v1/tasks/metrics_task/windows",
                params={"since": start.isoformat(), "bucket": "all"},
                headers=pg_metrics_api.headers("read"),
            )
            found = [w for w in response.json()["windows"] if w["n_results"] == 30]
            time.sleep(0.5)
    finally:
        beat.stop()
    if not found:
        pytest.fail(
            "beat + worker computed no window:\n--- beat ---\n"
            + beat.log(3000)
            + "\n--- worker ---\n"
            + worker.log(3000)
        )
    assert found[0]["window_start"].startswith(start.isoformat()[:19])


def test_jobs_are_acked_late_and_retried_only_on_transient_errors() -> None:
    import psycopg
    from sqlalchemy.exc import IntegrityError, OperationalError

    from shadowplane_workers.app import app
    from shadowplane_workers.jobs import (
        compute_window_job,
        deliver_webhooks,
        grade_tasks,
        plan_windows,
    )

    assert app.conf.task_acks_late is True and app.conf.task_reject_on_worker_lost is True
    # A lost worker's job comes back, but never while it may still be running elsewhere.
    visibility = app.conf.broker_transport_options["visibility_timeout"]
    assert app.conf.task_time_limit < visibility <= 900
    for job in (plan_windows, compute_window_job, grade_tasks):
        assert set(job.autoretry_for) >= {OperationalError, psycopg.OperationalError}
        assert not any(issubclass(IntegrityError, kind) for kind in job.autoretry_for)
        assert not any(issubclass(ValueError, kind) for kind in job.autoretry_for)
        assert job.retry_backoff
    # Webhooks retry per delivery in the outbox (backoff, attempts); the job itself is not
    # retried: beat runs it again within seconds (tests/notify/test_celery_delivery.py).
    assert not getattr(deliver_webhooks, "autoretry_for", ())
