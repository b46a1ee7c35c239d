"""Eval sets (docs/evalsets.md): labelled items copied out of review into self-contained eval
items (results are pruned, eval items are not), and stored runs of edge models on them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from controlplane.models.base import Base, BigIntPK, JSONType, UTCDateTime, utcnow


class EvalItem(Base):
    """One eval item. Added by backfills, remade or withdrawn only when its review item's
    labels change (service.follow_labels); `item_id` = sha256(task + NFKC, whitespace-collapsed input),
    so the same input enters each layer of a task's eval sets once (a rollback's input that
    was already a `boundary` item still enters `regression`, the layer that must always
    run); `seq` gives the stable export order."""

    __tablename__ = "eval_items"
    __table_args__ = (
        UniqueConstraint("item_id", "layer"),
        Index("ix_eval_items_task_id_layer_seq", "task_id", "layer", "seq"),
        # Whether a review item is in its layer yet (each pass asks it of the labelled
        # regression items: controlplane.evalsets.service.fill_waiting).
        Index("ix_eval_items_review_item_id", "review_item_id"),
    )

    seq: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    item_id: Mapped[str] = mapped_column(String(64))
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    # boundary | anomaly | regression
    layer: Mapped[str] = mapped_column(String(16))
    input: Mapped[Any] = mapped_column(JSONType, nullable=True)
    expected: Mapped[Any] = mapped_column(JSONType, nullable=True)
    edge_output: Mapped[Any] = mapped_column(JSONType, nullable=True)
    cloud_output: Mapped[Any] = mapped_column(JSONType, nullable=True)
    bucket: Mapped[str] = mapped_column(String(32))
    failure_class: Mapped[str | None] = mapped_column(String(64))
    tags: Mapped[list[str]] = mapped_column(JSONType, default=list)
    # result, labels, reviewers, comparator version, flag version, window, and for
    # `regression` the rule and window that fired.
    provenance: Mapped[dict[str, Any]] = mapped_column(JSONType)
    review_item_id: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class EvalRun(Base):
    """A run of an edge model on one layer of a task's eval set, scored against `expected`."""

    __tablename__ = "eval_runs"
    __table_args__ = (Index("ix_eval_runs_task_id_model", "task_id", "model"),)

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    layer: Mapped[str] = mapped_column(String(16))
    model: Mapped[str] = mapped_column(String(200))
    # The content hash of the layer's export the run was scored on (manifest's hash), and
    # how many of its items the run answered.
    set_hash: Mapped[str] = mapped_column(String(64))
    # The digest of the comparator spec the run was scored with (fingerprint.spec_digest): a
    # run is current only under the comparator that scored it. Null for runs stored before
    # it was kept: never current.
    comparator: Mapped[str | None] = mapped_column(String(64))
    n_items: Mapped[int] = mapped_column(Integer)
    n_correct: Mapped[int] = mapped_column(Integer)
    accuracy: Mapped[float | None] = mapped_column(Float)
    # bucket → {"n", "correct", "accuracy"}
    per_bucket: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    actor: Mapped[str] = mapped_column(String(200))
    note: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class EvalLayerDigest(Base):
    """A layer's content hash (the sha256 of its JSONL export) and item count, kept in the
    transaction that changes the layer (its row locked first, so writers of one layer take
    turns), so listings and the gate read it instead of every item of the layer."""

    __tablename__ = "eval_layer_digests"

    task_id: Mapped[int] = mapped_column(
        ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True
    )
    layer: Mapped[str] = mapped_column(String(16), primary_key=True)
    sha256: Mapped[str | None] = mapped_column(String(64))
    n_items: Mapped[int] = mapped_column(Integer, default=0)
