"""Tasks (what routing services offload) and their versioned configs."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, ForeignKey, Integer, String, UniqueConstraint, false
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
    # The input-length distribution the task was graded and promoted on (docs/evidence.md,
    # "Input shift"): {"counts": [...], "n": ..., "over_cap": ..., "source": ..., "start":
    # ..., "end": ...}, set when it leaves shadow; the `input_shift` rule and alert compare
    # the trailing span with it.
    input_baseline: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    # Set by an `input_shift` rollback: no promotion until a grade over traffic since
    # `shifted_at` says offload (re-grade, don't re-tune thresholds). Both are decisions.
    needs_regrade: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # When the inputs last shifted (the rollback's time): grades read only traffic after it.
    shifted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
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


class ConfigHold(Base):
    """A task whose flag is held on the cloud because its stored config `version` did not
    parse, announced (flag.grounded) since `since`; the apply that fixes it deletes the row
    and announces the end (flag.ungrounded)."""

    __tablename__ = "config_holds"

    task_id: Mapped[int] = mapped_column(
        ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True
    )
    since: Mapped[datetime] = mapped_column(UTCDateTime)
    version: Mapped[int] = mapped_column(Integer)


class FailingEvaluation(Base):
    """A task whose every rollout evaluation has failed since `since` (no row while they
    succeed): past rollout.actions.EVALUATION_GRACE its flag goes to the cloud."""

    __tablename__ = "failing_evaluations"

    task_id: Mapped[int] = mapped_column(
        ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True
    )
    since: Mapped[datetime] = mapped_column(UTCDateTime)
    # The latest failure noted: a failure long after it starts the count again.
    last_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # When its flag went to the cloud: every flag published for the task is killed until
    # an evaluation works (rollout.flags.publish), the lift of the kill switch included.
    grounded_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
