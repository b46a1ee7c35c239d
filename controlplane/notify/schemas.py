"""What `GET /v1/webhooks/deliveries` answers."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel

DeliveryStatus = Literal["pending", "delivered", "failed"]


class DeliveryOut(BaseModel):
    delivery_id: str
    event_id: int
    kind: str
    task: str | None
    url: str
    status: DeliveryStatus
    attempts: int
    last_error: str | None
    created_at: datetime
    updated_at: datetime
    # pending: when the next attempt is due (or the current one's lease ends)
    next_attempt_at: datetime | None
    delivered_at: datetime | None


class DeliveriesOut(BaseModel):
    deliveries: list[DeliveryOut]
    counts: dict[str, int]
