"""Human review (docs/review.md): sampled review items, reviewers' labels and skips, and
route-accuracy windows computed from the labels.

A review item is self-contained: it copies what the reviewer sees (input, both outputs,
diff, as the payload policy kept them) and what route accuracy and eval sets read
(decision, bucket, result time, versions) when it is queued, so pruning the results
never takes an item, a label or an eval set with it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from controlplane.models.base import Base, BigIntPK, JSONType, UTCDateTime, utcnow

# Review items' queue priority, lowest handed out first: the results of a rollback's
# breaching cell, the rest of its regression sample, every other item.
PRIORITY_BREACHING = 0
PRIORITY_REGRESSION = 1
PRIORITY_OTHER = 2

ResultRef = BigInteger().with_variant(Integer(), "sqlite")


class ReviewItem(Base):
    __tablename__ = "review_items"
    __table_args__ = (
        # A result is queued at most once (request ids are unique per task).
        UniqueConstraint("task_id", "request_id"),
        # The claim query: open items of a task, regression items first (priority), then
        # oldest first; and of every task.
        Index("ix_review_items_claim", "task_id", "state", "priority", "id"),
        Index("ix_review_items_claim_any", "state", "priority", "id"),
        Index("ix_review_items_task_id_result_ts", "task_id", "result_ts"),
        # The item a reviewer holds (a claim hands it back while the lease lasts): only the
        # few items under a lease are indexed.
        Index(
            "ix_review_items_claimed_by",
            "claimed_by",
            postgresql_where=text("claimed_by IS NOT NULL"),
            sqlite_where=text("claimed_by IS NOT NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    # The id of the result it was drawn from. Not a foreign key: `prune` removes results and
    # the item (its own copy of everything it needs) and its provenance outlive them.
    result_id: Mapped[int | None] = mapped_column(ResultRef, index=True)
    request_id: Mapped[str] = mapped_column(String(200))
    result_ts: Mapped[datetime] = mapped_column(UTCDateTime)
    # The metric window the result belongs to (its start), and its length bucket.
    window_start: Mapped[datetime] = mapped_column(UTCDateTime)
    bucket: Mapped[str] = mapped_column(String(32))
    input_tokens: Mapped[int] = mapped_column(Integer)
    decision: Mapped[str] = mapped_column(String(8))
    served: Mapped[str] = mapped_column(String(8))
    flag_version: Mapped[int | None] = mapped_column(Integer)
    config_version: Mapped[int] = mapped_column(Integer)
    comparator: Mapped[str] = mapped_column(String(32))
    comparator_version: Mapped[int] = mapped_column(Integer)
    # The comparator's outcome (agree | conflict | invalid | NULL when not a pair).
    outcome: Mapped[str | None] = mapped_column(String(8))
    edge_error: Mapped[str | None] = mapped_column(String(64))
    edge_confidence: Mapped[float | None] = mapped_column(Float)
    edge_model: Mapped[str | None] = mapped_column(String(200))
    cloud_model: Mapped[str | None] = mapped_column(String(200))

    # pair (two answers, shown as A/B) | single (one answer: "is this right?")
    kind: Mapped[str] = mapped_column(String(8))
    # Why it was drawn: conflict | low_confidence | agree | cloud_decided | edge_error |
    # invalid | regression. Never shown to a reviewer.
    reason: Mapped[str] = mapped_column(String(16))
    # boundary | anomaly | regression (the eval-set layer its labels go to)
    layer: Mapped[str] = mapped_column(String(16))
    # The queue hands items out by priority, then oldest first (PRIORITY_*): a
    # rollback's regression items of its breaching cell, its other regression items, then
    # every other item.
    priority: Mapped[int] = mapped_column(
        SmallInteger, default=PRIORITY_OTHER, server_default=str(PRIORITY_OTHER)
    )
    # P(this result was drawn) = the sampler's probability × the payload's keep probability.
    inclusion_probability: Mapped[float] = mapped_column(Float)
    # For a pair: True when A is the edge answer. Drawn at random per item, never shown.
    a_is_edge: Mapped[bool] = mapped_column(Boolean)
    # The payload as the task's policy kept it (masked under `redacted`).
    policy: Mapped[str] = mapped_column(String(16))
    input: Mapped[Any] = mapped_column(JSONType, nullable=True)
    edge_output: Mapped[Any] = mapped_column(JSONType, nullable=True)
    cloud_output: Mapped[Any] = mapped_column(JSONType, nullable=True)
    diff: Mapped[Any] = mapped_column(JSONType, nullable=True)
    edge_error_message: Mapped[str | None] = mapped_column(Text)
    # For `regression`: the decision, rule, bucket and window that fired.
    provenance: Mapped[dict[str, Any] | None] = mapped_column(JSONType)

    # How many different reviewers must label it (reviewers_per_item; one more after a
    # disagreement).
    reviews_needed: Mapped[int] = mapped_column(Integer, default=1)
    # queued (waiting for labels) | done (labelled by enough reviewers)
    state: Mapped[str] = mapped_column(String(8), default="queued")
    # The lease: at most one reviewer holds an item at a time.
    claimed_by: Mapped[str | None] = mapped_column(String(200))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    done_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class ReviewLabel(Base):
    """One reviewer's verdict on one item. Never edited: a newer label of the same reviewer
    on the same item supersedes it (the newest per reviewer counts)."""

    __tablename__ = "review_labels"
    __table_args__ = (Index("ix_review_labels_item_id_reviewer", "item_id", "reviewer"),)

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    item_id: Mapped[int] = mapped_column(
        ResultRef, ForeignKey("review_items.id", ondelete="CASCADE")
    )
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"), index=True)
    # The API key's name.
    reviewer: Mapped[str] = mapped_column(String(200))
    # As the reviewer gave it: a_correct | b_correct | both_correct | both_wrong | unclear
    # (pairs); correct | wrong | unclear (singles).
    verdict: Mapped[str] = mapped_column(String(16))
    # Resolved to the sides: edge_correct | cloud_correct | both_correct | both_wrong |
    # unclear (pairs); correct | wrong | unclear (singles).
    resolved: Mapped[str] = mapped_column(String(16))
    failure_class: Mapped[str | None] = mapped_column(String(64))
    corrected: Mapped[Any] = mapped_column(JSONType, nullable=True)
    note: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ReviewSkip(Base):
    """A reviewer passed on an item (with an optional reason); it is not offered to them again."""

    __tablename__ = "review_skips"
    __table_args__ = (Index("ix_review_skips_item_id_reviewer", "item_id", "reviewer"),)

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    item_id: Mapped[int] = mapped_column(
        ResultRef, ForeignKey("review_items.id", ondelete="CASCADE")
    )
    reviewer: Mapped[str] = mapped_column(String(200))
    reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class RouteAccuracyWindow(Base):
    """Route accuracy of a task over one `route_acc_window_seconds` window of result time,
    from the labels (inverse-probability weighted). Recomputed while open; closed at
    end + `route_acc_lateness_seconds`, then never changed."""

    __tablename__ = "route_acc_windows"
    __table_args__ = (UniqueConstraint("task_id", "window_start"),)

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    window_start: Mapped[datetime] = mapped_column(UTCDateTime)
    window_end: Mapped[datetime] = mapped_column(UTCDateTime)
    # Labels counted (not `unclear`) and left out as `unclear`.
    n_labels: Mapped[int] = mapped_column(Integer, default=0)
    n_unclear: Mapped[int] = mapped_column(Integer, default=0)
    # The weighted estimate, Kish's effective sample size, and the Wilson interval on it.
    estimate: Mapped[float | None] = mapped_column(Float)
    n_effective: Mapped[float] = mapped_column(Float, default=0.0)
    low: Mapped[float | None] = mapped_column(Float)
    high: Mapped[float | None] = mapped_column(Float)
    # The two error directions, as weighted shares of the labelled pairs.
    missed_offload: Mapped[float | None] = mapped_column(Float)
    wrong_offload: Mapped[float | None] = mapped_column(Float)
    # failure class → weighted share of labelled edge answers with that class.
    failure_classes: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    config_version: Mapped[int] = mapped_column(Integer)
    computed_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    closed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
