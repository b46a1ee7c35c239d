"""README, "Running it in production" and "Settings": what beat queues and how often. (The
README's "each worker logs which reader it runs at startup" is checked on a real worker in
tests/workers/test_celery_worker.py.)"""

from __future__ import annotations

from controlplane.settings import Settings


def test_beat_queues_the_passes_every_tick_and_reads_the_outbox_every_poll() -> None:
    """README, "Running it in production" and "Settings": beat queues the window work every
    `SHADOWPLANE_TICK_SECONDS` and the webhook delivery every `SHADOWPLANE_WEBHOOK_POLL_SECONDS`."""
    from shadowplane_workers.schedule import beat_schedule

    for tick, poll in ((10.0, 1.0), (30.0, 5.0)):
        schedule = beat_schedule(
            Settings(database_url="sqlite://", tick_seconds=tick, webhook_poll_seconds=poll)
        )
        assert schedule["plan-windows"]["schedule"] == tick
        assert schedule["deliver-webhooks"]["schedule"] == poll
