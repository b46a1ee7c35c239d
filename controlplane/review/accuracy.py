"""Route accuracy from labels (docs/review.md). TODO(route-accuracy helper): fill in."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session


def refresh_route_accuracy(session: Session, task_id: int, now: datetime) -> list[Any]:
    """Recompute the task's open route-accuracy windows from its labels, close those past
    `route_acc_lateness_seconds`, and raise `new_failure_class` alerts; returns the alert
    events (controlplane.alerts.service.AlertEvent)."""
    return []
