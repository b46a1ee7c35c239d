"""The beat schedule: one entry, `metrics.plan`, every `SHADOWPLANE_TICK_SECONDS`.

The plan job lists the (task, window) pairs that are due or have new results and queues
one `metrics.compute_window` job for each, which the workers share.
"""

from __future__ import annotations

from typing import Any

from controlplane.settings import Settings

PLAN_JOB = "metrics.plan"


def beat_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    return {
        "plan-windows": {
            "task": PLAN_JOB,
            "schedule": settings.tick_seconds or 10.0,
            # A plan older than one period is superseded by the next one.
            "options": {"expires": settings.tick_seconds or 10.0},
        }
    }
