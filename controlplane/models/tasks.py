"""Tasks (what routing services offload) and their versioned configs."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Float, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from controlplane.models.base import Base, JSONType, UTCDateTime, utcnow


class Task(Base):
    __tablename__ = "tasks"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    # cloud | shadow | canary | full | rolled_back (docs/evidence.md); set from the first
    # config only.
    stage: Mapped[str] = mapped_column(String(16), default="shadow")
    config_version: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # The input-length p95 the drift alert compares against (docs/evidence.md): the trailing
    # median, reset (to None) on each stage change (controlplane.rollout.stages).
    input_p95_baseline: Mapped[float | None] = mapped_column(Float)
    # In canary: which of the config's canary_steps is current.
    canary_step: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # When the task entered its stage: verdict history, runs, CUSUM sums and the input
    # baseline start over from here.
    stage_changed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class TaskConfigVersion(Base):
    __tablename__ = "task_config_versions"
    __table_args__ = (UniqueConstraint("task_id", "version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer)
    # The normalised config (defaults filled in) and the sha256 of its canonical JSON.
    config: Mapped[dict[str, Any]] = mapped_column(JSONType)
    config_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    created_by: Mapped[str] = mapped_column(String(200))
