"""Results: one slim row per result, the payload text kept per the task's policy, and the
key that makes a request id count once. On PostgreSQL `results` and `payloads` are
partitioned by day of `ts` (`controlplane.models.partitions`), so their primary keys carry
the time too and `result_keys` is the one unique key across the days; SQLite keeps the same
tables unpartitioned.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    Float,
    Index,
    Integer,
    SmallInteger,
    String,
    Text,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from controlplane.models.base import Base, BigIntPK, JSONType, UTCDateTime


class Result(Base):
    __tablename__ = "results"
    # No index on the request id: one result is read back through `result_keys`, which
    # gives its `ts` (and so its day); every other read is a time range.
    __table_args__ = (
        # Serves every per-task time-range scan (windows, review sampling, prune).
        Index("ix_results_task_id_ts", "task_id", "ts"),
        # Free repeats: the latest earlier cloud answers to the same input, newest first
        # (controlplane.ingest.repository.earlier_prints). The hash leads, so the planner
        # never takes this index for a task's time range.
        Index("ix_results_input_hash_ts", "input_hash", "ts"),
        # A window's repeat pairs (their per-field differences), without reading the window.
        Index(
            "ix_results_task_id_ts_repeats",
            "task_id",
            "ts",
            postgresql_where=text("repeat_outcome IS NOT NULL"),
            sqlite_where=text("repeat_outcome IS NOT NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    # No foreign key: ingest writes results only for tasks it knows (read from `tasks`,
    # again every few seconds), and a task is never deleted; the check per stored result cost about 2.7 µs of PostgreSQL's CPU (a
    # quarter of a binary COPY's row into this table).
    task_id: Mapped[int] = mapped_column(Integer)
    request_id: Mapped[str] = mapped_column(String(200))
    ts: Mapped[datetime] = mapped_column(UTCDateTime)
    received_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # Raw under `payload_policy: full`; under `redacted` and `none` a keyed hash ("h:" and
    # 32 hex digits, see ingest.scoring.hashed_id), never the id that was sent.
    session_id: Mapped[str | None] = mapped_column(String(200))
    user_id: Mapped[str | None] = mapped_column(String(200))
    # sticky_bucket(task, key) of the raw key the task's `sticky_by` names, computed at
    # ingest under every policy (the sample-ratio check needs no raw id); NULL without a key.
    sticky_bucket: Mapped[int | None] = mapped_column(SmallInteger)
    input_tokens: Mapped[int] = mapped_column(Integer)
    decision: Mapped[str] = mapped_column(String(8))
    served: Mapped[str] = mapped_column(String(8))
    degraded: Mapped[bool] = mapped_column(Boolean)
    # Raw under `full`, masked under `redacted`, NULL under `none` (no free text at all).
    degrade_reason: Mapped[str | None] = mapped_column(String(200))
    flag_version: Mapped[int | None] = mapped_column(Integer)
    input_segments: Mapped[list[int] | None] = mapped_column(JSONType)
    config_version: Mapped[int] = mapped_column(Integer)
    bucket: Mapped[str] = mapped_column(String(32))
    comparator: Mapped[str] = mapped_column(String(32))
    comparator_version: Mapped[int] = mapped_column(Integer)
    # agree | conflict | invalid; NULL when the result is not a pair.
    outcome: Mapped[str | None] = mapped_column(String(8))

    edge_ran: Mapped[bool] = mapped_column(Boolean)
    edge_error: Mapped[str | None] = mapped_column(String(64))
    edge_latency_ms: Mapped[float | None] = mapped_column(Float)
    edge_ttfb_ms: Mapped[float | None] = mapped_column(Float)
    edge_confidence: Mapped[float | None] = mapped_column(Float)
    edge_valid: Mapped[bool | None] = mapped_column(Boolean)
    edge_model: Mapped[str | None] = mapped_column(String(200))
    edge_input_tokens: Mapped[int | None] = mapped_column(Integer)
    edge_output_tokens: Mapped[int | None] = mapped_column(Integer)
    edge_cost: Mapped[float | None] = mapped_column(Float)

    cloud_ran: Mapped[bool] = mapped_column(Boolean)
    cloud_error: Mapped[str | None] = mapped_column(String(64))
    cloud_latency_ms: Mapped[float | None] = mapped_column(Float)
    cloud_ttfb_ms: Mapped[float | None] = mapped_column(Float)
    cloud_model: Mapped[str | None] = mapped_column(String(200))
    cloud_input_tokens: Mapped[int | None] = mapped_column(Integer)
    cloud_output_tokens: Mapped[int | None] = mapped_column(Integer)
    cloud_cost: Mapped[float | None] = mapped_column(Float)

    # The cloud's own noise floor (docs/grading.md). A repeat pair is the cloud's answer
    # scored against a second cloud answer to the same input: `asked` when the router sent
    # it as `cloud_repeat`, `duplicate` when an earlier result with the same input hash was
    # answered by the cloud within `grading.duplicate_seconds`. Never an edge pair.
    # agree | conflict | invalid (either cloud answer outside the task's schema); NULL: none.
    repeat_outcome: Mapped[str | None] = mapped_column(String(8))
    repeat_source: Mapped[str | None] = mapped_column(String(9))
    # The fields (json_fields) or checks (text_conservation) the two cloud answers differ on.
    repeat_diff: Mapped[list[str] | None] = mapped_column(JSONType)
    # What the repeat cost: its reported cost, else its tokens at the task's cloud prices.
    repeat_cost: Mapped[float | None] = mapped_column(Float)
    # Keyed hash (hex) of the NFKC-normalised, whitespace-collapsed input, when an input was
    # sent, under every payload policy: finds free repeats, never reveals the text.
    input_hash: Mapped[str | None] = mapped_column(String(32))
    # The cloud output's fingerprint: keyed digests of what the comparator compares (the
    # label; each field; each conservation check), so a later duplicate input can be scored
    # against it without the text being kept. NULL when the cloud gave no output.
    cloud_print: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    # The sides the router did not run ({"cloud_repeat": "busy"}): reasons raw under `full`,
    # masked under `redacted`, null under `none`. NULL when it named none.
    skipped: Mapped[dict[str, str | None] | None] = mapped_column(JSONType)


class Payload(Base):
    """The text of a result, present only when the task's payload policy kept it."""

    __tablename__ = "payloads"

    # No foreign key: a day of payloads is dropped with its day of results (retention), and
    # a key into a partitioned table would have to carry the day too.
    result_id: Mapped[int] = mapped_column(BigIntPK, primary_key=True)
    # The result's `ts`: what the payloads are partitioned by on PostgreSQL.
    result_ts: Mapped[datetime] = mapped_column(UTCDateTime)
    policy: Mapped[str] = mapped_column(String(16))
    # Probability this payload was kept (1 for conflicts, errors, invalid and
    # low-confidence results), so samples can be weighted back.
    keep_probability: Mapped[float] = mapped_column(Float)
    input: Mapped[Any] = mapped_column(JSONType, nullable=True)
    edge_output: Mapped[Any] = mapped_column(JSONType, nullable=True)
    cloud_output: Mapped[Any] = mapped_column(JSONType, nullable=True)
    diff: Mapped[Any] = mapped_column(JSONType, nullable=True)
    edge_error_message: Mapped[str | None] = mapped_column(Text)
    cloud_error_message: Mapped[str | None] = mapped_column(Text)


class ResultKey(Base):
    """Each (task, request id) stored once, whatever its `ts`: a resend is a duplicate even
    when it carries another time, or none (stored at the time received)."""

    __tablename__ = "result_keys"
    __table_args__ = (
        # Retention deletes keys older than its cut-off by this. Keys arrive nearly in `ts`
        # order: on PostgreSQL a BRIN index finds them, at next to no cost per claim.
        Index("ix_result_keys_ts", "ts", postgresql_using="brin"),
    )

    # No foreign key: ingest claims keys only for tasks it has just read, and a check per
    # claimed key cost about a third of the claim (`results` keeps its own).
    task_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    request_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    # The stored result's `ts`.
    ts: Mapped[datetime] = mapped_column(UTCDateTime)
