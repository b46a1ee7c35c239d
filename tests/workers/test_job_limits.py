"""How long jobs may run, and the visibility timeout that follows (shadowplane_workers/app.py,
`job_limits`): a job still waiting or running is never handed to a second worker, and one
whose worker died comes back a little after the longest a job may stay unacknowledged,
given back by any running worker within a tick (tests/drills/test_worker_killed.py runs it).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from controlplane.settings import Settings
from shadowplane_workers.app import GRADE_TIME_LIMIT, JobLimits, job_limits, make_celery


@pytest.mark.parametrize(
    ("limit", "webhook_timeout", "expected"),
    [
        # The defaults: a retry waits at most a minute, a delivery pass runs 60 s and then one
        # send of 2 x 5 s: max(60 + 60, 60 + 10) + 5 = 125.
        (60.0, 5.0, JobLimits(run=60.0, retry_wait=60, delivery=70.0, visibility=125.0)),
        # A short limit shortens the retry wait with it: max(2 + 2, 2 + 2 x 1) + 5 = 9.
        (2.0, 1.0, JobLimits(run=2.0, retry_wait=2, delivery=4.0, visibility=9.0)),
        # A long one keeps the minute: max(300 + 60, 300 + 10) + 5 = 365.
        (300.0, 5.0, JobLimits(run=300.0, retry_wait=60, delivery=310.0, visibility=365.0)),
        # A receiver given long to answer makes the delivery pass the longest:
        # max(10 + 10, 10 + 2 x 30) + 5 = 75.
        (10.0, 30.0, JobLimits(run=10.0, retry_wait=10, delivery=70.0, visibility=75.0)),
        # A fraction of a second: the retry wait is whole seconds, 1: max(1.5, 0.5 + 1) + 5.
        (0.5, 0.5, JobLimits(run=0.5, retry_wait=1, delivery=1.5, visibility=6.5)),
    ],
)
def test_the_visibility_timeout_is_a_little_over_the_longest_a_job_stays_unacknowledged(
    limit: float, webhook_timeout: float, expected: JobLimits
) -> None:
    settings = Settings(
        database_url="sqlite://",
        job_time_limit_seconds=limit,
        webhook_timeout_seconds=webhook_timeout,
    )
    assert job_limits(settings) == expected
    conf = make_celery(settings).conf
    assert conf.task_time_limit == expected.run
    assert conf.broker_transport_options["visibility_timeout"] == expected.visibility


@pytest.mark.parametrize(("tick", "every"), [(1.0, 1.0), (10.0, 10.0), (30.0, 30.0), (0.0, 10.0)])
def test_every_worker_looks_for_jobs_past_the_timeout_every_tick(tick: float, every: float) -> None:
    """kombu's default looks every 100 s (a call every 10 s, 1 in 10 looking); here every call
    looks, once a tick (beat's 10 s when the in-process pass is off, tick 0)."""
    options = make_celery(
        Settings(database_url="sqlite://", tick_seconds=tick)
    ).conf.broker_transport_options
    assert options["unacked_restore_interval"] == every
    assert options["unacked_restore_throttle"] == 1
    assert options["unacked_mutex_expire"] == every


def test_the_jobs_carry_their_limits() -> None:
    from shadowplane_workers import jobs

    assert jobs.LIMITS == job_limits(jobs.get_settings())
    limits = jobs.LIMITS
    # Window, plan and partition jobs: the app's time limit; retried within the timeout.
    for job in (jobs.compute_window_job, jobs.plan_windows, jobs.keep_partitions_job):
        assert job.time_limit == limits.run and job.acks_late is True, job.name
        assert job.retry_backoff_max == limits.retry_wait, job.name
        assert limits.run + job.retry_backoff_max < limits.visibility, job.name
    assert jobs.deliver_webhooks.time_limit == limits.delivery < limits.visibility
    # Grading may run past the timeout: acknowledged when it starts, so never handed on.
    assert jobs.grade_tasks.time_limit == GRADE_TIME_LIMIT > limits.visibility
    assert jobs.grade_tasks.acks_late is False


@pytest.mark.integration
def test_kombu_takes_the_options_by_their_names(redis_url: Callable[[], str]) -> None:
    """A misspelt transport option is ignored without a word: read them back from a channel
    on a real Redis."""
    settings = Settings(
        database_url="sqlite://", redis_url=redis_url(), tick_seconds=3, job_time_limit_seconds=7
    )
    with make_celery(settings).connection_for_read() as connection:
        channel = connection.default_channel
        assert channel.visibility_timeout == max(7 + 7, 7 + 2 * 5) + 5
        assert channel.unacked_restore_throttle == 1
        assert channel.unacked_mutex_expire == 3
        # The interval is read from the options when a worker's event loop starts.
        assert connection.transport_options["unacked_restore_interval"] == 3
