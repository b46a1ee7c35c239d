"""Windowed metrics (docs/evidence.md): one row per task window, one per window and bucket,
and alerts.

A window row records the bucket boundaries and config version it was computed with and
when the clock closed it. Metric rows store counts, sums and percentiles; every rate,
interval and per-1k figure is derived from them on read (`controlplane.metrics.fields`).
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Date,
    Float,
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


class Window(Base):
    __tablename__ = "windows"
    __table_args__ = (
        UniqueConstraint("task_id", "window_start"),
        Index("ix_windows_open", "closed_at", "task_id"),
    )

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    window_start: Mapped[datetime] = mapped_column(UTCDateTime)
    window_end: Mapped[datetime] = mapped_column(UTCDateTime)
    # What the metrics were computed with: buckets come from input_tokens and these bounds.
    length_buckets: Mapped[list[int]] = mapped_column(JSONType)
    config_version: Mapped[int] = mapped_column(Integer)
    computed_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # Set by the first tick whose clock is at or past end + allowed lateness; metrics of a
    # closed window never change again, later results only raise n_late.
    closed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    alerts_evaluated: Mapped[bool] = mapped_column(Boolean, default=False)
    # Set once the review sampler has drawn this closed window's items.
    review_sampled: Mapped[bool] = mapped_column(Boolean, default=False)


# A window's `all` row that counts results: what the Overview looks for (a task's last
# window with traffic, however long it has been quiet) and sums for its sparklines.
WITH_RESULTS = "bucket = 'all' AND n_results > 0"


class WindowMetrics(Base):
    __tablename__ = "window_metrics"
    __table_args__ = (
        UniqueConstraint("task_id", "window_start", "bucket"),
        # Without it, finding the last window with results scans every empty window the
        # scheduler closed since (a day of 10 s windows: 8,640 rows a task, each refresh).
        # PostgreSQL answers the sparklines from the index alone (its included counts).
        Index(
            "ix_window_metrics_with_results",
            "task_id",
            "window_start",
            postgresql_include=["n_results", "n_pairs", "n_agree", "n_served_edge"],
            postgresql_where=text(WITH_RESULTS),
            sqlite_where=text(WITH_RESULTS),
        ),
    )

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    window_id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"),
        ForeignKey("windows.id", ondelete="CASCADE"),
        index=True,
    )
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    window_start: Mapped[datetime] = mapped_column(UTCDateTime)
    bucket: Mapped[str] = mapped_column(String(32))

    n_results: Mapped[int] = mapped_column(Integer)
    n_pairs: Mapped[int] = mapped_column(Integer)
    n_agree: Mapped[int] = mapped_column(Integer)
    n_conflict: Mapped[int] = mapped_column(Integer)
    n_invalid: Mapped[int] = mapped_column(Integer)
    n_edge_runs: Mapped[int] = mapped_column(Integer)
    n_edge_errors: Mapped[int] = mapped_column(Integer)
    n_edge_fails: Mapped[int] = mapped_column(Integer)
    n_edge_attempts: Mapped[int] = mapped_column(Integer)
    n_offload_fails: Mapped[int] = mapped_column(Integer)
    n_degraded: Mapped[int] = mapped_column(Integer)
    n_served_edge: Mapped[int] = mapped_column(Integer)
    n_late: Mapped[int] = mapped_column(Integer, default=0)
    # Repeat pairs (cloud vs a second cloud answer): self_agreement = n_repeat_agree /
    # n_repeat_pairs; n_repeat_invalid counts pairs where a cloud answer broke the schema.
    n_repeat_pairs: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    n_repeat_agree: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    n_repeat_invalid: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # {field or check: repeat pairs that differed on it} (json_fields, text_conservation).
    repeat_diffs: Mapped[dict[str, int] | None] = mapped_column(JSONType)
    # Sum of input_tokens: the mean input length per call (grading's frequency dimension).
    input_tokens_sum: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    # `all` only: how many inputs fall in each fixed log-scale bin (controlplane.metrics.
    # lengths), and how many are over the config's max_input_tokens (null without a cap).
    input_hist: Mapped[list[int] | None] = mapped_column(JSONType)
    n_over_cap: Mapped[int | None] = mapped_column(Integer)

    edge_latency_ms_p50: Mapped[float | None] = mapped_column(Float)
    edge_latency_ms_p95: Mapped[float | None] = mapped_column(Float)
    edge_latency_ms_p99: Mapped[float | None] = mapped_column(Float)
    edge_ttfb_ms_p50: Mapped[float | None] = mapped_column(Float)
    edge_ttfb_ms_p95: Mapped[float | None] = mapped_column(Float)
    edge_ttfb_ms_p99: Mapped[float | None] = mapped_column(Float)
    cloud_latency_ms_p50: Mapped[float | None] = mapped_column(Float)
    cloud_latency_ms_p95: Mapped[float | None] = mapped_column(Float)
    cloud_latency_ms_p99: Mapped[float | None] = mapped_column(Float)
    cloud_ttfb_ms_p50: Mapped[float | None] = mapped_column(Float)
    cloud_ttfb_ms_p95: Mapped[float | None] = mapped_column(Float)
    cloud_ttfb_ms_p99: Mapped[float | None] = mapped_column(Float)
    input_tokens_p50: Mapped[float | None] = mapped_column(Float)
    input_tokens_p95: Mapped[float | None] = mapped_column(Float)

    edge_cost: Mapped[float] = mapped_column(Float)
    cloud_cost: Mapped[float] = mapped_column(Float)
    baseline_cost: Mapped[float] = mapped_column(Float)


class TaskGrade(Base):
    """A task's grade (docs/grading.md), one row per task and UTC day: the day's latest
    computation replaces the earlier one, the days before are history."""

    __tablename__ = "task_grades"
    __table_args__ = (UniqueConstraint("task_id", "day"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    day: Mapped[date] = mapped_column(Date)
    # offload | shadow | keep_cloud | forbid | insufficient
    tier: Mapped[str] = mapped_column(String(16))
    score: Mapped[float | None] = mapped_column(Float)
    config_version: Mapped[int] = mapped_column(Integer)
    computed_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # The whole grade as GET /v1/tasks/{task}/grade answers it.
    document: Mapped[dict[str, Any]] = mapped_column(JSONType)


class Alert(Base):
    __tablename__ = "alerts"
    __table_args__ = (
        # At most one open (or acknowledged, not yet resolved) alert per task and kind.
        Index(
            "uq_alerts_task_id_kind_active",
            "task_id",
            "kind",
            unique=True,
            postgresql_where=text("state <> 'resolved'"),
            sqlite_where=text("state <> 'resolved'"),
        ),
        Index("ix_alerts_state_opened_at", "state", "opened_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    # conflict_jump | edge_share_jump | input_shift | no_traffic | srm | new_failure_class
    kind: Mapped[str] = mapped_column(String(32))
    # open | acknowledged | resolved
    state: Mapped[str] = mapped_column(String(16))
    window_start: Mapped[datetime] = mapped_column(UTCDateTime)
    value: Mapped[float | None] = mapped_column(Float)
    baseline: Mapped[float | None] = mapped_column(Float)
    message: Mapped[str] = mapped_column(Text)
    opened_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    acknowledged_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    acknowledged_by: Mapped[str | None] = mapped_column(String(200))
    resolved_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class ScanMark(Base):
    """How far the planner has read the results table, by id, to find windows with new results."""

    __tablename__ = "scan_marks"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    # The next scan reads results past `previous_id`. `last_id`: the highest result id a
    # scan saw. On SQLite (one writer at a time) `previous_id` is the scan before's
    # `last_id`. On PostgreSQL `last_xmax` is the snapshot's xmax of the scan that saw
    # `last_id`: once the current snapshot's xmin has passed it, every transaction that
    # could still write an id up to `last_id` has ended, and `previous_id` moves to it;
    # until then the scans read from where they read (a batch whose ids were drawn before
    # one pass and committed after the next is still found).
    last_id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"))
    previous_id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"))
    last_xmax: Mapped[int | None] = mapped_column(BigInteger())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
