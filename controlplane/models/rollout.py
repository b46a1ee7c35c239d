"""Routing flags (DESIGN §2, §5): one published document per task, and the global revision."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Boolean, ForeignKey, Integer, Text
from sqlalchemy.orm import Mapped, mapped_column

from controlplane.models.base import Base, JSONType, UTCDateTime, utcnow


class Flag(Base):
    __tablename__ = "flags"

    task_id: Mapped[int] = mapped_column(
        ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True
    )
    # Bumped on every change of the task's routing document.
    version: Mapped[int] = mapped_column(Integer)
    document: Mapped[dict[str, Any]] = mapped_column(JSONType)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    reason: Mapped[str] = mapped_column(Text)


class FlagState(Base):
    """One row: the revision every flag change bumps, and the global kill switch."""

    __tablename__ = "flag_state"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    revision: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"))
    killed: Mapped[bool] = mapped_column(Boolean, default=False)
    kill_reason: Mapped[str | None] = mapped_column(Text)
