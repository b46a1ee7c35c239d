"""What the audit API answers."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel


class AuditEntryOut(BaseModel):
    id: int
    created_at: datetime
    actor: str
    action: str
    task: str | None
    # What changed, by action (versions, stages, reasons, key names...).
    details: dict[str, Any]


class AuditOut(BaseModel):
    entries: list[AuditEntryOut]
