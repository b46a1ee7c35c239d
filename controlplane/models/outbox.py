"""The webhook outbox (docs/http-api.md, "Webhooks"): events written in the transaction that
made them, and one delivery per (event, webhook URL) that the delivery runners work through."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Index, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column

from controlplane.models.base import Base, BigIntPK, JSONType, UTCDateTime, utcnow


class OutboxEvent(Base):
    """A decision, alert or notice to announce; its document is the webhook body's content."""

    __tablename__ = "outbox_events"
    __table_args__ = (
        # The events not yet fanned out to the configured URLs: few, looked up every second.
        Index(
            "ix_outbox_events_unsent",
            "id",
            postgresql_where=text("fanned_out_at IS NULL"),
            sqlite_where=text("fanned_out_at IS NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    # decision | alert | notice
    kind: Mapped[str] = mapped_column(String(16))
    # null for kill and lift, which act on every task
    task: Mapped[str | None] = mapped_column(String(100))
    document: Mapped[dict[str, Any]] = mapped_column(JSONType)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # When its deliveries were created, one per URL configured then.
    fanned_out_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class WebhookDelivery(Base):
    """One event to one URL: pending until a receiver answers 2xx (delivered) or the attempts
    run out (failed, kept for people to see). `delivery_id` is the same on every attempt."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        UniqueConstraint("event_id", "url"),
        Index(
            "ix_webhook_deliveries_due",
            "next_attempt_at",
            postgresql_where=text("status = 'pending'"),
            sqlite_where=text("status = 'pending'"),
        ),
        Index("ix_webhook_deliveries_status_id", "status", "id"),
    )

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    event_id: Mapped[int] = mapped_column(
        BigIntPK, ForeignKey("outbox_events.id", ondelete="CASCADE")
    )
    url: Mapped[str] = mapped_column(String(2000))
    # A uuid, sent as X-Shadowplane-Delivery: receivers dedupe on it.
    delivery_id: Mapped[str] = mapped_column(String(36), unique=True)
    # pending | delivered | failed
    status: Mapped[str] = mapped_column(String(16), default="pending")
    # Attempts started (counted when claimed, so a runner that dies mid-send uses one up).
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    # A pending delivery is due from then on; a claimed one is leased until then.
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
