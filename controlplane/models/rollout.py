"""Rollout state (docs/evidence.md, "Rollouts"): routing flags with the global revision,
every version of every flag, decisions, blocked models."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from controlplane.models.base import Base, BigIntPK, JSONType, UTCDateTime, utcnow


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


class FlagHistory(Base):
    """Every version of every task's flag, written with the flag (append-only), so a
    result's `flag_version` can be read back to the routing fields it was served by."""

    __tablename__ = "flag_history"
    __table_args__ = (UniqueConstraint("task_id", "version"),)

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer)
    # The global revision after this change; null for the versions the migration copied
    # from `flags` (stored before history was kept, at a revision nobody recorded).
    revision: Mapped[int | None] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"))
    # The routing fields (controlplane.rollout.flags.ROUTING_FIELDS) of this version.
    fields: Mapped[dict[str, Any]] = mapped_column(JSONType)
    # The flag's reason: what made this version.
    cause: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class FlagState(Base):
    """One row: the revision every flag change bumps, and the global kill switch."""

    __tablename__ = "flag_state"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    revision: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"))
    killed: Mapped[bool] = mapped_column(Boolean, default=False)
    kill_reason: Mapped[str | None] = mapped_column(Text)


class Decision(Base):
    """A recorded rollout action: append-only, with actor, reason and evidence."""

    __tablename__ = "decisions"
    __table_args__ = (Index("ix_decisions_task_id_created_at", "task_id", "created_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    # null for kill and lift, which act on every task
    task_id: Mapped[int | None] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    # rollback | promote | rearm | kill | lift | needs_regrade | regraded
    action: Mapped[str] = mapped_column(String(16))
    # `policy` or the key's name
    actor: Mapped[str] = mapped_column(String(200))
    reason: Mapped[str] = mapped_column(Text)
    rule: Mapped[str | None] = mapped_column(String(200))
    bucket: Mapped[str | None] = mapped_column(String(32))
    stage_before: Mapped[str | None] = mapped_column(String(16))
    stage_after: Mapped[str | None] = mapped_column(String(16))
    flag_version_before: Mapped[int | None] = mapped_column(Integer)
    flag_version_after: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    evidence: Mapped[dict[str, Any]] = mapped_column(JSONType)
    # A policy decision's identity (task, rule, cell, last window of the run): the same
    # windows never make two decisions, even from two evaluators at once.
    dedupe_key: Mapped[str | None] = mapped_column(String(300), unique=True)


class BlockedModel(Base):
    """An edge model version a rollback blocked from auto-promotion until a person lifts it."""

    __tablename__ = "blocked_models"
    __table_args__ = (
        Index(
            "uq_blocked_models_task_id_model_active",
            "task_id",
            "model",
            unique=True,
            postgresql_where=text("lifted_at IS NULL"),
            sqlite_where=text("lifted_at IS NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    model: Mapped[str] = mapped_column(String(200))
    decision_id: Mapped[int | None] = mapped_column(ForeignKey("decisions.id"))
    blocked_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    lifted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    lifted_by: Mapped[str | None] = mapped_column(String(200))
    lift_reason: Mapped[str | None] = mapped_column(Text)
