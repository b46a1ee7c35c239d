"""The review sampler: per closed metric window, which results with a kept payload are
queued for review and with what probability each was drawn — one SQL pass over the window
(`draw`), the quota split by `allocation`. The strata, the quota and the draw are specified
in docs/review.md.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Float,
    and_,
    case,
    cast,
    func,
    literal,
    or_,
    select,
    text,
    union_all,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Session
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from controlplane.catalog.schemas import TaskConfig
from controlplane.catalog.service import task_runtimes
from controlplane.db import dialect_insert
from controlplane.ingest.buckets import bucket_labels
from controlplane.models import Payload, Result, ReviewItem, Task, Window
from controlplane.review.allocation import STRATA, Allocation, Cell, allocate

SINGLE = ("edge_error", "invalid")
# How far into the hash order the draw reads per cell: (a x quota + b) / N of the range,
# expected a x quota + b candidates, far more than any cell's share of the quota.
FRONT = (2.0, 30.0)
# The draw's hash is a signed 64-bit integer: this many values.
HASH_RANGE = float(2**64)
# Closed windows drawn per call: a backlog (windows closed before the sampler existed)
# is worked off a pass at a time instead of in one long transaction.
WINDOWS_PER_CALL = 100
INSERT_CHUNK = 200


# --- the draw's hash: the same order for the same (task, window) on every run -------------


class draw_hash(FunctionElement[int]):
    """A 64-bit hash of a result id under a seed: the order of the uniform draw."""

    type = BigInteger()
    inherit_cache = True


@compiles(draw_hash, "postgresql")
def _draw_hash_pg(element: draw_hash, compiler: SQLCompiler, **kw: Any) -> str:
    # hashint8extended is a hash PostgreSQL's hash partitioning relies on: stable across
    # versions and platforms.
    return f"hashint8extended({compiler.process(element.clauses, **kw)})"


@compiles(draw_hash, "sqlite")
def _draw_hash_sqlite(element: draw_hash, compiler: SQLCompiler, **kw: Any) -> str:
    return f"sp_draw_hash({compiler.process(element.clauses, **kw)})"


def _sqlite_draw_hash(value: int, seed: int) -> int:
    digest = hashlib.blake2b(f"{seed}:{value}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def register_hash(session: Session) -> None:
    """Give the session's SQLite connection the draw's hash (PostgreSQL has its own)."""
    connection = session.connection()
    if connection.dialect.name == "sqlite":
        raw = connection.connection.driver_connection
        raw.create_function("sp_draw_hash", 2, _sqlite_draw_hash, deterministic=True)  # type: ignore[union-attr]


def seed_of(task: str, start: datetime) -> int:
    """The draw's seed for a task's window: a signed 63-bit integer."""
    digest = hashlib.sha256(f"{task}\x00{start.isoformat()}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


# --- strata -------------------------------------------------------------------------------


def stratum_of(low_confidence: float, *, codes: bool = False) -> ColumnElement[Any]:
    """SQL: the result's stratum (first match), NULL when it cannot be reviewed; with
    `codes`, its index in STRATA instead of its name."""

    def name(stratum: str) -> Any:
        return literal(STRATA.index(stratum)) if codes else literal(stratum)

    cloud_answered = and_(Result.cloud_ran.is_(True), Result.cloud_error.is_(None))
    return case(
        (and_(Result.edge_error.is_not(None), cloud_answered), name("edge_error")),
        (
            and_(
                Result.edge_error.is_(None),
                or_(Result.outcome == "invalid", Result.edge_valid.is_(False)),
                cloud_answered,
            ),
            name("invalid"),
        ),
        (Result.outcome == "conflict", name("conflict")),
        (
            and_(Result.outcome == "agree", Result.edge_confidence < low_confidence),
            name("low_confidence"),
        ),
        (and_(Result.outcome == "agree", Result.decision == "cloud"), name("cloud_decided")),
        (Result.outcome == "agree", name("agree")),
        else_=None,
    )


# --- the window's draw ------------------------------------------------------------------


def _cell_code(config: TaskConfig, boundaries: Sequence[int]) -> ColumnElement[int | None]:
    """SQL: the result's cell as one small integer (bucket index * 8 + stratum index), NULL
    when it cannot be reviewed. Integers group far faster than the labels."""
    bucket = case(
        *((Result.input_tokens < b, literal(i)) for i, b in enumerate(boundaries)),
        else_=literal(len(boundaries)),
    )
    stratum = stratum_of(config.low_confidence, codes=True)
    return bucket * 8 + stratum


def _drawn_rows(
    session: Session,
    task: Task,
    config: TaskConfig,
    start: datetime,
    end: datetime,
    boundaries: Sequence[int],
    expected: float | None,
) -> list[Any]:
    """Per cell a row with its candidate count (id NULL), and the candidates whose hash
    lies in the first `expected / N` of the hash range (all of them when None)."""
    seed = literal(seed_of(task.name, start), BigInteger)
    candidates = (
        select(
            Result.id.label("id"),
            _cell_code(config, boundaries).label("cell"),
            draw_hash(Result.id, seed).label("h"),
        )
        .join(Payload, (Payload.result_id == Result.id) & (Payload.result_ts == Result.ts))
        .where(Result.task_id == task.id, Result.ts >= start, Result.ts < end)
        .cte("candidates")
    )
    counts = (
        select(candidates.c.cell, func.count().label("n"))
        .where(candidates.c.cell.is_not(None))
        .group_by(candidates.c.cell)
        .cte("counts")
    )
    picked = select(candidates.c.id, candidates.c.cell, candidates.c.h, counts.c.n).join(
        counts, counts.c.cell == candidates.c.cell
    )
    if expected is not None:
        # The hash as a share of its range, in [0, 1): a prefix of the draw's order.
        share = cast(candidates.c.h, Float) / HASH_RANGE + 0.5
        picked = picked.where(share < literal(expected, Float) / cast(counts.c.n, Float))
    totals = select(
        literal(None, BigInteger).label("id"),
        counts.c.cell,
        literal(None, BigInteger).label("h"),
        counts.c.n,
    )
    return list(session.execute(union_all(totals, picked)).all())


def draw(
    session: Session,
    task: Task,
    config: TaskConfig,
    start: datetime,
    end: datetime,
    boundaries: Sequence[int],
) -> tuple[Allocation, list[tuple[int, Cell]]]:
    """One pass over the window's results with a kept payload: the allocation (with each
    cell's number of candidates) and the drawn result ids with their cells.

    A cell's draw is its k candidates of smallest hash. The statement returns each cell's
    count and only the candidates in the first (2 x quota + 30) / N of the hash range —
    about 2 x quota + 30 per cell, far more than any cell's share, so no sort of the window
    is needed; in the unlikely case a cell returns fewer than its share, the statement is
    run again returning every candidate."""
    quota = config.review.quota_per_window
    register_hash(session)
    if session.get_bind().dialect.name == "postgresql":
        # One statement over up to millions of rows: its hash tables in memory, and no JIT
        # compilation (it costs more than it saves on a single pass).
        session.execute(text("SET LOCAL work_mem = '64MB'"))
        session.execute(text("SET LOCAL jit = off"))
    labels = bucket_labels(boundaries)

    def cell_of(code: int) -> Cell:
        return labels[code // 8], STRATA[code % 8]

    expected: float | None = FRONT[0] * quota + FRONT[1]
    while True:
        rows = _drawn_rows(session, task, config, start, end, boundaries, expected)
        counts = {cell_of(row.cell): int(row.n) for row in rows if row.id is None}
        alloc = allocate(quota, counts, labels)
        by_cell: dict[Cell, list[tuple[int, int]]] = {}
        for row in rows:
            if row.id is not None:
                by_cell.setdefault(cell_of(row.cell), []).append((int(row.h), int(row.id)))
        if expected is None or all(len(by_cell.get(c, ())) >= alloc.wanted(c) for c in counts):
            break
        expected = None
    chosen: list[tuple[int, Cell]] = []
    for cell, k in alloc.cells.items():
        chosen += [(result_id, cell) for _, result_id in sorted(by_cell[cell])[:k]]
    for stratum, k in alloc.pooled.items():
        # The stratum's k smallest hashes over all its buckets: each lies in the first k of
        # its own cell, which the statement returned.
        front = sorted(
            (h, result_id, cell)
            for cell, found in by_cell.items()
            if cell[1] == stratum
            for h, result_id in found
        )
        chosen += [(result_id, cell) for _, result_id, cell in front[:k]]
    return alloc, chosen


def item_fields() -> tuple[Any, ...]:
    """The columns of a result and its payload that a review item copies."""
    return (
        Result.id,
        Result.request_id,
        Result.ts,
        Result.input_tokens,
        Result.decision,
        Result.served,
        Result.flag_version,
        Result.config_version,
        Result.comparator,
        Result.comparator_version,
        Result.outcome,
        Result.edge_error,
        Result.edge_confidence,
        Result.edge_model,
        Result.cloud_model,
        Payload.policy,
        Payload.keep_probability,
        Payload.input,
        Payload.edge_output,
        Payload.cloud_output,
        Payload.diff,
        Payload.edge_error_message,
    )


def cloud_invalid(diff: Any) -> bool:
    """Whether the comparator's diff says the cloud output broke the task's schema (a
    conflict whose diff names the cloud side). Such a result is queued as a single item
    (the cloud answer alone: is it right?), never as a pair: in a pair the broken answer
    would always be the cloud's, and a reviewer could tell the sides apart."""
    return isinstance(diff, dict) and "cloud" in diff


def item_row(
    row: Any,
    *,
    task_id: int,
    bucket: str,
    stratum: str,
    window: datetime,
    reason: str,
    layer: str,
    probability: float,
    provenance: dict[str, Any] | None,
    reviews_needed: int,
    now: datetime,
) -> dict[str, Any]:
    """The review item of a result (a row of `item_fields`): a single item in the anomaly
    layer for an edge error, an invalid output or a cloud answer that broke the schema."""
    single = stratum in SINGLE or cloud_invalid(row.diff)
    if single and layer == "boundary":
        layer = "anomaly"
    if single and reason == "conflict":
        reason = "cloud_invalid"
    return {
        "task_id": task_id,
        "result_id": row.id,
        "request_id": row.request_id,
        "result_ts": row.ts,
        "window_start": window,
        "bucket": bucket,
        "input_tokens": row.input_tokens,
        "decision": row.decision,
        "served": row.served,
        "flag_version": row.flag_version,
        "config_version": row.config_version,
        "comparator": row.comparator,
        "comparator_version": row.comparator_version,
        "outcome": row.outcome,
        "edge_error": row.edge_error,
        "edge_confidence": row.edge_confidence,
        "edge_model": row.edge_model,
        "cloud_model": row.cloud_model,
        "kind": "single" if single else "pair",
        "reason": reason,
        "layer": layer,
        "inclusion_probability": probability,
        # The order a reviewer sees the pair in: a fair coin per item, never shown.
        "a_is_edge": (not single) and secrets.randbits(1) == 1,
        "policy": row.policy,
        "input": row.input,
        "edge_output": row.edge_output,
        "cloud_output": row.cloud_output,
        "diff": row.diff,
        "edge_error_message": row.edge_error_message,
        "provenance": provenance,
        "reviews_needed": reviews_needed,
        "state": "queued",
        "created_at": now,
    }


def insert_items(session: Session, rows: list[dict[str, Any]]) -> int:
    """Insert items, skipping results already queued; how many were new."""
    added = 0
    for i in range(0, len(rows), INSERT_CHUNK):
        stmt = (
            dialect_insert(session, ReviewItem.__table__)
            .values(rows[i : i + INSERT_CHUNK])
            .on_conflict_do_nothing(index_elements=["task_id", "request_id"])
            .returning(ReviewItem.__table__.c.id)
        )
        added += len(session.execute(stmt).all())
    return added


def sample_window(
    session: Session, task: Task, config: TaskConfig, window: Window, now: datetime
) -> int:
    """Draw and queue one closed window's items; how many were queued."""
    start, end = window.window_start, window.window_end
    alloc, chosen = draw(session, task, config, start, end, window.length_buckets)
    if not chosen:
        return 0
    cells = dict(chosen)
    found = session.execute(
        select(*item_fields())
        .join(Payload, (Payload.result_id == Result.id) & (Payload.result_ts == Result.ts))
        .where(Result.id.in_(list(cells)))
        .order_by(Result.id)
    ).all()
    rows = []
    for row in found:
        bucket, stratum = cells[row.id]
        rows.append(
            item_row(
                row,
                task_id=task.id,
                bucket=bucket,
                stratum=stratum,
                window=start,
                reason=stratum,
                layer="anomaly" if stratum in SINGLE else "boundary",
                probability=alloc.probability((bucket, stratum)) * row.keep_probability,
                provenance=None,
                reviews_needed=config.review.reviewers_per_item,
                now=now,
            )
        )
    return insert_items(session, rows)


def _config(session: Session, task: Task) -> TaskConfig | None:
    runtime = task_runtimes(session, {task.name}).get(task.name)
    return runtime.config if runtime is not None else None


def sample_closed_windows(session: Session, task_id: int, now: datetime) -> int:
    """Draw the review items of every closed, not yet sampled window of the task; returns
    how many items were queued. A task under `payload_policy: none` (no text kept) or with
    a quota of 0 has its windows marked sampled with nothing drawn."""
    task = session.get(Task, task_id)
    if task is None:
        return 0
    config = _config(session, task)
    if config is None:
        return 0
    windows = list(
        session.scalars(
            select(Window)
            .where(
                Window.task_id == task_id,
                Window.closed_at.is_not(None),
                Window.review_sampled.is_(False),
            )
            .order_by(Window.window_start)
            .limit(WINDOWS_PER_CALL)
            # A second pass sampling the same task at the same time skips these windows.
            .with_for_update(skip_locked=True)
        )
    )
    queued = 0
    for window in windows:
        if config.payload_policy != "none" and config.review.quota_per_window > 0:
            queued += sample_window(session, task, config, window, now)
        window.review_sampled = True
    session.flush()
    return queued
