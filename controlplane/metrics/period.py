"""The time a task's windows cover: where a page showing them starts looking."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from controlplane.models import Window


def window_span(session: Session, task_id: int) -> tuple[datetime, datetime] | None:
    """The first window's start and the last window's end of the task (None: no windows)."""
    first, last = session.execute(
        select(func.min(Window.window_start), func.max(Window.window_end)).where(
            Window.task_id == task_id
        )
    ).one()
    if first is None or last is None:
        return None
    return first, last
