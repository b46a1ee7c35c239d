"""What the alerts API reads and answers."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from controlplane.errors import StrictBody

AlertState = Literal["open", "acknowledged", "resolved"]


class AckIn(StrictBody):
    note: str | None = Field(None, max_length=2000)


class AlertOut(BaseModel):
    id: int
    task: str
    # conflict_jump | edge_share_jump | input_shift | no_traffic | srm | new_failure_class
    kind: str
    state: AlertState
    window_start: datetime
    value: float | None
    baseline: float | None
    message: str
    opened_at: datetime
    updated_at: datetime
    acknowledged_at: datetime | None
    acknowledged_by: str | None
    resolved_at: datetime | None


class AlertsOut(BaseModel):
    alerts: list[AlertOut]
