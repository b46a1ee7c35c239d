"""Reviewers' actions, whichever door calls them: claim the next item (blind), label it,
release or skip it, and the queue's counts. Each runs in one transaction; labels, skips
and releases write an audit entry with it (they are not announced to webhooks). A claim
is not audited: it changes nothing but who holds a lease for a few minutes.

`ActionError(status, detail)` says why an action cannot be done: 404 no such task or
item, 409 the reviewer does not hold the item's lease, 422 a label that does not fit (a
note or a skip reason too long or holding a control character among them).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, and_, or_, select
from sqlalchemy.orm import Session

from controlplane.audit.service import record
from controlplane.catalog.service import task_or_404, task_runtimes
from controlplane.db import in_transaction, session_scope
from controlplane.errors import ActionError
from controlplane.models import ReviewItem, Task, TaskConfigVersion
from controlplane.models.base import utcnow
from controlplane.review import blind, noise, queue, repository
from controlplane.review.progress import regression_counts
from controlplane.settings import get_settings

# Control characters (C0) a note or a reason may not hold: all but tab and line breaks.
# PostgreSQL refuses a NUL in text; the others would show as nothing, or move a cursor.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")

NO_QUEUE = (
    "no review queue: payload_policy is none, so no text is kept to review; route accuracy "
    "stays insufficient (set payload_policy to full or redacted to review)"
)


def _task_id(session: Session, task: str | None) -> int | None:
    return None if task is None else task_or_404(session, task).id


def _keeping_no_text(session: Session, task_id: int | None) -> list[int]:
    """The tasks (the named one, and those with queued items) whose current config is
    `payload_policy: none`: their kept text is no longer to be shown, whether a claim names
    the task or not. Read from the stored configs, not the runtime cache, so a switch to
    `none` applies at once."""
    queued = select(ReviewItem.task_id).where(ReviewItem.state == "queued")
    wanted = (
        or_(Task.id.in_(queued), Task.id == task_id) if task_id is not None else Task.id.in_(queued)
    )
    rows = session.execute(
        select(Task.id, TaskConfigVersion.config)
        .join(
            TaskConfigVersion,
            and_(
                TaskConfigVersion.task_id == Task.id,
                TaskConfigVersion.version == Task.config_version,
            ),
        )
        .where(wanted)
    )
    return sorted(tid for tid, config in rows if (config or {}).get("payload_policy") == "none")


def _task_name(session: Session, task_id: int) -> str:
    return session.scalar(select(Task.name).where(Task.id == task_id)) or ""


def check_text(field: str, value: str | None, limit: int) -> None:
    """422 naming the field unless a reviewer's free text (a note, a skip reason) fits: at
    most `limit` characters, and no control character but tab and line breaks. Checked here
    so the API, the CLI and the dashboard refuse it the same way, before the database does."""
    if value is None:
        return
    if len(value) > limit:
        raise ActionError(422, f"{field}: at most {limit} characters, got {len(value)}")
    found = _CONTROL.search(value)
    if found is not None:
        raise ActionError(
            422,
            f"{field}: holds the control character U+{ord(found.group()):04X} at position "
            f"{found.start() + 1}; only tabs and line breaks may be among its characters",
        )


def claim(
    engine: Engine,
    task: str | None,
    reviewer: str,
    now: datetime | None = None,
    *,
    lease_seconds: float | None = None,
) -> dict[str, Any] | None:
    """Claim the next item for the reviewer (of one task, or any) and return its blind
    view, with its task's review guidelines and a note when its differences are all on
    fields the task's reference changes between runs (review.noise); None when the queue
    holds nothing for them."""
    now = now or utcnow()
    seconds = lease_seconds if lease_seconds is not None else get_settings().review_lease_seconds

    def work(session: Session) -> dict[str, Any] | None:
        task_id = _task_id(session, task)
        exclude = _keeping_no_text(session, task_id)
        if task is not None and task_id in exclude:
            raise ActionError(409, f"task {task[:200]!r}: {NO_QUEUE}")
        item = queue.claim(session, task_id, reviewer, now, seconds, exclude=exclude)
        if item is None:
            return None
        name = _task_name(session, item.task_id)
        shown = blind.view(item, name)
        runtime = task_runtimes(session, {name}).get(name)
        shown["guidelines"] = runtime.config.review.guidelines if runtime is not None else None
        if runtime is not None and blind.differing(shown["diff"]):
            # Only an item whose differences could all be noise pays for reading the windows.
            shown["note"] = blind.noise_note(shown["diff"], noise.noisy_now(session, runtime, now))
        return shown

    return in_transaction(engine, work)


def label(
    engine: Engine,
    item_id: int,
    reviewer: str,
    *,
    verdict: str,
    failure_class: str | None = None,
    corrected: Any = None,
    note: str | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Label the item the reviewer holds (audited). Answers the label's id and where the
    item stands: `done`, or `queued` when it waits for more reviewers. A regression item
    it leaves done enters the task's `regression` eval set at the next pass
    (`evalsets.service.fill_waiting`): that layer fills from labels alone."""
    check_text("note", note, queue.MAX_NOTE)
    now = now or utcnow()

    def work(session: Session) -> dict[str, Any]:
        item = repository.locked_item(session, item_id)
        name = _task_name(session, item.task_id) if item is not None else None
        per_item, spec = 1, None
        if name:
            runtime = task_runtimes(session, {name}).get(name)
            if runtime is not None:
                per_item = runtime.config.review.reviewers_per_item
                spec = runtime.comparator_spec
        done = queue.label(
            session,
            item_id,
            reviewer,
            verdict=verdict,
            failure_class=failure_class,
            corrected=corrected,
            note=note,
            now=now,
            reviewers_per_item=per_item,
            locked=item,
            comparator_spec=spec,
        )
        record(
            session,
            actor=reviewer,
            action="review.label",
            task=name or None,
            details={
                "item": item_id,
                "label": done.label_id,
                "verdict": verdict,
                "resolved": done.resolved,
                "failure_class": failure_class,
                "corrected": corrected is not None,
                "state": done.state,
                "reviews_needed": done.reviews_needed,
                "correction": done.correction,
            },
        )
        return {
            "item": item_id,
            "label": done.label_id,
            "state": done.state,
            "reviews_needed": done.reviews_needed,
            "reviewers": done.reviewers,
        }

    return in_transaction(engine, work)


def has_labelled(engine: Engine, item_id: int, reviewer: str) -> bool:
    """Whether the reviewer has labelled the item (their label stands; they may correct it)."""
    with session_scope(engine) as session:
        return repository.has_label(session, item_id, reviewer)


def release(
    engine: Engine,
    item_id: int,
    reviewer: str,
    *,
    skip: bool = False,
    reason: str | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Give the item back (audited); with `skip` (or a reason) it is never offered to this
    reviewer again."""
    check_text("reason", reason, queue.MAX_REASON)
    now = now or utcnow()
    skip = skip or reason is not None

    def work(session: Session) -> dict[str, Any]:
        item = queue.release(session, item_id, reviewer, skip=skip, reason=reason, now=now)
        name = _task_name(session, item.task_id)
        record(
            session,
            actor=reviewer,
            action="review.skip" if skip else "review.release",
            task=name or None,
            details={"item": item_id, "reason": reason},
        )
        return {"item": item_id, "skipped": skip, "state": item.state}

    return in_transaction(engine, work)


def queue_overview(
    engine: Engine, task: str | None = None, now: datetime | None = None
) -> list[dict[str, Any]]:
    """Per task: items queued (free to claim), claimed (under a lease), labelled today
    (UTC), done; with an edge model blocked, `regression` counts the regression items its
    rollback queued, labelled of needed, naming no model (null without a block); a task
    under `payload_policy: none` is listed with why it has no queue."""
    now = now or utcnow()
    day_start = now.replace(hour=0, minute=0, second=0, microsecond=0)
    with session_scope(engine) as session:
        query = select(Task.id, Task.name).order_by(Task.name)
        if task is not None:
            query = query.where(Task.id == task_or_404(session, task).id)
        tasks = list(session.execute(query))
        counts = repository.queue_counts(session, [tid for tid, _ in tasks], now, day_start)
        regression = regression_counts(session, [tid for tid, _ in tasks])
        configs = task_runtimes(session, {name for _, name in tasks})
    out = []
    for tid, name in tasks:
        runtime = configs.get(name)
        none = runtime is not None and runtime.config.payload_policy == "none"
        out.append(
            {
                "task": name,
                **counts[tid],
                "regression": regression.get(tid),
                "has_queue": not none,
                "note": NO_QUEUE if none else None,
            }
        )
    return out
