"""Which fields or checks of a task are noisy now, for the note on a blind review item
(docs/review.md, "Noisy fields").

Read as a grade reads them: the `all` rows of the task's windows over its grading span
(the last `grading.span` of its current config version, and after an input shift only
since it), their per-field repeat differences summed, and a field the cloud changed on
more than `grading.noisy_field_rate` of the repeat pairs is noisy (controlplane.metrics.noise.noisy_fields). Read from the
window aggregates, not from a kept grade: review sits below grading.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from controlplane.catalog.service import TaskRuntime
from controlplane.metrics.noise import noisy_fields
from controlplane.metrics.windows import span_since
from controlplane.review import repository
from controlplane.timeutil import as_utc


def noisy_now(session: Session, task: TaskRuntime, now: datetime) -> list[dict[str, Any]]:
    """The task's noisy fields or checks over its grading span up to `now`, as
    noisy_fields answers them ({"name", "count", "pairs", "rate"}, noisiest first)."""
    now = as_utc(now)
    grading = task.config.grading
    started = repository.version_created(session, task.id, task.config_version)
    shifted = repository.shifted_at(session, task.id)
    since = span_since(
        now,
        grading.span_seconds,
        None if started is None else as_utc(started),
        task.config.window_seconds,
        None if shifted is None else as_utc(shifted),
    )
    diffs, pairs = repository.repeat_noise(session, task.id, task.config_version, since, now)
    return noisy_fields(diffs, pairs, grading.noisy_field_rate)
