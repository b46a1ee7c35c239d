"""The outbox's SQL: fan events out to URLs, claim due deliveries, record what happened.

A claim selects rows `FOR UPDATE SKIP LOCKED` (on PostgreSQL several runners take
different rows without waiting on each other), then updates them only if they are still
claimable, RETURNING what it got: on SQLite, which has one writer and no row locks, that
compare-and-set is what keeps two runners from taking the same row. (One statement,
UPDATE … WHERE id IN (SELECT … LIMIT 1 FOR UPDATE SKIP LOCKED), is not safe: PostgreSQL
may run the subquery again per row and update more rows than the limit.)
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import exists, func, or_, select, update
from sqlalchemy.orm import Session

from controlplane.db import dialect_insert
from controlplane.models import OutboxEvent, WebhookDelivery

STATUSES = ("pending", "delivered", "failed")
# Events older than this when first fanned out are not sent (a deployment that configures
# its first webhook URL is not flooded with its history); they stay in the table.
BACKLOG = timedelta(days=7)
NOT_CONFIGURED = "its URL is no longer in SHADOWPLANE_WEBHOOK_URLS: not sent"


@dataclass(frozen=True)
class Claimed:
    """A delivery taken by one runner until `leased_until`, with its event."""

    id: int
    delivery_id: str
    url: str
    attempts: int
    event_id: int
    kind: str
    task: str | None
    document: dict[str, Any]


def has_work(session: Session, *, now: datetime) -> bool:
    """Anything to fan out or send (a read: a runner with nothing to do takes no lock)."""
    unsent = exists().where(OutboxEvent.fanned_out_at.is_(None))
    due = exists().where(
        WebhookDelivery.status == "pending", WebhookDelivery.next_attempt_at <= now
    )
    return bool(session.scalar(select(or_(unsent, due))))


def fan_out(session: Session, *, urls: list[str], now: datetime, limit: int = 500) -> int:
    """Create one pending delivery per (event, URL) for events not fanned out yet; returns
    how many events were taken. A delivery row exists once per pair (unique), so its
    delivery id never changes."""
    taken = session.scalars(
        select(OutboxEvent.id)
        .where(OutboxEvent.fanned_out_at.is_(None))
        .order_by(OutboxEvent.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    ).all()
    if not taken:
        return 0
    events = session.execute(
        update(OutboxEvent)
        .where(OutboxEvent.id.in_(taken), OutboxEvent.fanned_out_at.is_(None))
        .values(fanned_out_at=now)
        .returning(OutboxEvent.id, OutboxEvent.created_at)
    ).all()
    rows = [
        {
            "event_id": event_id,
            "url": url,
            "delivery_id": str(uuid.uuid4()),
            "status": "pending",
            "attempts": 0,
            "next_attempt_at": now,
            "last_error": None,
            "created_at": now,
            "updated_at": now,
            "delivered_at": None,
        }
        for event_id, created_at in events
        if created_at >= now - BACKLOG
        for url in urls
    ]
    if rows:
        insert = dialect_insert(session, WebhookDelivery.__table__)
        session.execute(insert.on_conflict_do_nothing(index_elements=["event_id", "url"]), rows)
    return len(events)


def retire_unconfigured(session: Session, *, urls: list[str], now: datetime) -> int:
    """Pending deliveries to URLs taken out of the settings are failed, not sent."""
    done = session.execute(
        update(WebhookDelivery)
        .where(WebhookDelivery.status == "pending", WebhookDelivery.url.not_in(urls))
        .values(status="failed", last_error=NOT_CONFIGURED, updated_at=now)
    )
    return int(getattr(done, "rowcount", 0) or 0)


def claim(
    session: Session, *, urls: list[str], now: datetime, leased_until: datetime
) -> Claimed | None:
    """Take the most overdue pending delivery: count the attempt and lease it (it becomes
    due again at `leased_until` if the runner dies before recording the outcome)."""
    due = session.scalar(
        select(WebhookDelivery.id)
        .where(
            WebhookDelivery.status == "pending",
            WebhookDelivery.next_attempt_at <= now,
            WebhookDelivery.url.in_(urls),
        )
        .order_by(WebhookDelivery.next_attempt_at, WebhookDelivery.id)
        .limit(1)
        .with_for_update(skip_locked=True)
    )
    if due is None:
        return None
    row = session.execute(
        update(WebhookDelivery)
        .where(
            WebhookDelivery.id == due,
            WebhookDelivery.status == "pending",
            WebhookDelivery.next_attempt_at <= now,
        )
        .values(attempts=WebhookDelivery.attempts + 1, next_attempt_at=leased_until, updated_at=now)
        .returning(
            WebhookDelivery.id,
            WebhookDelivery.delivery_id,
            WebhookDelivery.url,
            WebhookDelivery.attempts,
            WebhookDelivery.event_id,
        )
    ).first()
    if row is None:
        return None
    event = session.get_one(OutboxEvent, row.event_id)
    return Claimed(
        id=row.id,
        delivery_id=row.delivery_id,
        url=row.url,
        attempts=row.attempts,
        event_id=event.id,
        kind=event.kind,
        task=event.task,
        document=event.document,
    )


def mark_delivered(session: Session, *, delivery: Claimed, now: datetime) -> None:
    session.execute(
        update(WebhookDelivery)
        .where(WebhookDelivery.id == delivery.id, WebhookDelivery.status == "pending")
        .values(status="delivered", delivered_at=now, updated_at=now, last_error=None)
    )


def mark_attempt_failed(
    session: Session,
    *,
    delivery: Claimed,
    error: str,
    now: datetime,
    retry_at: datetime | None,
) -> None:
    """Record a failed attempt: due again at `retry_at`, or failed for good when None. A
    runner whose lease ran out (another has taken a later attempt) changes nothing."""
    values: dict[str, Any] = {"last_error": error, "updated_at": now}
    if retry_at is None:
        values["status"] = "failed"
    else:
        values["next_attempt_at"] = retry_at
    session.execute(
        update(WebhookDelivery)
        .where(
            WebhookDelivery.id == delivery.id,
            WebhookDelivery.status == "pending",
            WebhookDelivery.attempts == delivery.attempts,
        )
        .values(**values)
    )


def delivery_counts(session: Session) -> dict[str, int]:
    """Deliveries per status (every status present, zero when none), for /metrics."""
    counts = dict.fromkeys(STATUSES, 0)
    for status, n in session.execute(
        select(WebhookDelivery.status, func.count()).group_by(WebhookDelivery.status)
    ):
        counts[status] = int(n)
    return counts


def list_deliveries(
    session: Session,
    *,
    status: str | None = None,
    task: str | None = None,
    limit: int = 100,
) -> list[tuple[WebhookDelivery, OutboxEvent]]:
    """The most recent deliveries first, with their events."""
    query = (
        select(WebhookDelivery, OutboxEvent)
        .join(OutboxEvent, OutboxEvent.id == WebhookDelivery.event_id)
        .order_by(WebhookDelivery.id.desc())
        .limit(limit)
    )
    if status is not None:
        query = query.where(WebhookDelivery.status == status)
    if task is not None:
        query = query.where(OutboxEvent.task == task)
    return [(d, e) for d, e in session.execute(query)]
