"""The beat schedule: `metrics.plan` every `SHADOWPLANE_TICK_SECONDS`, and the webhook
delivery pass every `SHADOWPLANE_WEBHOOK_POLL_SECONDS` (at least a second), and the
day partitions of PostgreSQL's `results` and `payloads` kept created ahead every hour, and
every task graded once a day, just after midnight UTC (`grading.grade_all`).

The plan job lists the (task, window) pairs that are due or have new results and queues
one `metrics.compute_window` job for each, which the workers share. The delivery job
sends the outbox's due webhooks (commits that write events also queue it at once).
"""

from __future__ import annotations

from typing import Any

from celery.schedules import crontab

from controlplane.notify.delivery import DELIVER_JOB
from controlplane.settings import Settings

PLAN_JOB = "metrics.plan"
PARTITIONS_JOB = "storage.partitions"
# The day partitions (PostgreSQL) are kept DAYS_AHEAD days ahead: hourly is plenty.
PARTITIONS_EVERY = 3600.0
GRADE_JOB = "grading.grade_all"
# Daily, once the day's last windows have closed; a grade kept today replaces any earlier
# one of the same day, so a run that is late or repeated is harmless.
GRADE_AT = crontab(minute=15, hour=0)
# A daily job not started within 12 hours is dropped: the next day's replaces it.
GRADE_EXPIRES = 12 * 3600.0


def beat_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    deliver_every = max(settings.webhook_poll_seconds, 1.0)
    return {
        "plan-windows": {
            "task": PLAN_JOB,
            "schedule": settings.tick_seconds or 10.0,
            # A plan older than one period is superseded by the next one.
            "options": {"expires": settings.tick_seconds or 10.0},
        },
        "day-partitions": {
            "task": PARTITIONS_JOB,
            "schedule": PARTITIONS_EVERY,
            "options": {"expires": PARTITIONS_EVERY},
        },
        "grade-tasks": {
            "task": GRADE_JOB,
            "schedule": GRADE_AT,
            "options": {"expires": GRADE_EXPIRES},
        },
        "deliver-webhooks": {
            "task": DELIVER_JOB,
            "schedule": deliver_every,
            "options": {"expires": deliver_every},
        },
    }
