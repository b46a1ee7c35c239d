"""The regression layer: a rollback queues a stratified sample of the reviewable results of
its breaching windows for review, the breaching cell first, in the firing's own
transaction, and moves those already queued to that layer (docs/review.md, "Regression").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Row, and_, case, func, literal, or_, select, update
from sqlalchemy.orm import Session

from controlplane.catalog.schemas import TaskConfig
from controlplane.ingest.buckets import bucket_labels
from controlplane.metrics.fields import ALL
from controlplane.metrics.repository import bucket_of
from controlplane.metrics.windows import window_start
from controlplane.models import Payload, Result, ReviewItem, Task
from controlplane.models.base import utcnow
from controlplane.models.review import PRIORITY_BREACHING, PRIORITY_REGRESSION
from controlplane.review.allocation import STRATA, Cell, split
from controlplane.review.sampler import (
    draw_hash,
    insert_items,
    item_fields,
    item_row,
    register_hash,
    seed_of,
    stratum_of,
)

# The breaching windows' other judged buckets keep `review.regression_items // OTHERS`
# even when the breaching cell could fill it all: the next model is judged mostly where the
# last one failed, and a little on what it must not break elsewhere.
OTHERS = 5
# Ids per statement when reading the chosen results.
CHUNK = 1000


def judged_bucket_labels(config: TaskConfig) -> list[str]:
    """The buckets holding inputs the edge may serve: the rule's `all` cell (the same
    buckets as controlplane.rollout.policy.judged_buckets, which this layer cannot import)."""
    labels = bucket_labels(config.length_buckets)
    cap = config.max_input_tokens
    if cap is None:
        return labels
    starts = [0, *config.length_buckets]
    return [label for label, lo in zip(labels, starts, strict=True) if lo <= cap]


def regression_allocation(
    n: int, counts: Mapping[Cell, int], breaching: Iterable[str], buckets: Sequence[str]
) -> dict[Cell, int]:
    """How many results of each (bucket, stratum) a rollback queues, at most `n` in all
    (pure). The breaching buckets take all but a fifth of `n` (`n // OTHERS`), or everything
    the other buckets cannot use; within each group the share is split over its strata in
    proportion to their candidates, one each first (conflicts first, then STRATA order)
    where the share allows."""
    hot = set(breaching)
    group = {
        True: {c: k for c, k in counts.items() if c[0] in hot and k > 0},
        False: {c: k for c, k in counts.items() if c[0] not in hot and k > 0},
    }
    available = {g: sum(cells.values()) for g, cells in group.items()}
    reserved = min(available[False], n // OTHERS)
    share = {True: min(available[True], n - reserved)}
    share[False] = min(available[False], n - share[True])
    order = [
        (b, s) for s in STRATA for b in [*buckets, *sorted({b for b, _ in counts} - set(buckets))]
    ]
    out: dict[Cell, int] = {}
    for g, cells in group.items():
        out.update(split(share[g], cells, cells, [c for c in order if c in cells]))
    return out


def queue_regression(
    session: Session,
    task: Task,
    config: TaskConfig,
    *,
    decision_id: int,
    rule: str,
    cell: str,
    ranges: list[tuple[datetime, datetime]],
    now: datetime | None = None,
) -> int:
    """Queue a rollback's regression sample, in the caller's (the firing's) transaction: at
    most `review.regression_items` of the reviewable results with a kept payload of its
    breaching windows, the breaching cell (`all` = the judged buckets) first
    (`regression_allocation`), the rest from the windows' other judged buckets. Within a
    (bucket, stratum) the results of smallest draw hash are taken (the sampler's hash of
    the result id, seeded by the task and the first window), so the same firing draws the
    same sample.

    A new item has reason `regression`, priority PRIORITY_BREACHING (breaching cell) or
    PRIORITY_REGRESSION, inclusion probability k/N of its (bucket, stratum) times its keep
    probability, and a provenance naming the decision, rule, cell and window. A drawn result
    already queued in another layer is moved to `regression` with that priority and
    provenance (it stays one item, with its own reason and probability); the firing puts one
    already done in the `regression` eval set (`evalsets.service.fill_regression`, called
    by the rollout above this layer). Returns how many items were
    queued or moved. Nothing is queued under `payload_policy: none` or with
    `regression_items: 0`."""
    n = config.review.regression_items
    ranges = _merged(ranges)
    if config.payload_policy == "none" or n == 0 or not ranges:
        return 0
    now = now or utcnow()
    register_hash(session)
    judged = judged_bucket_labels(config)
    breaching = judged if cell == ALL else [cell]
    buckets = [*judged, *([cell] if cell not in judged and cell != ALL else [])]
    bucket = bucket_of(Result.input_tokens, config.length_buckets)
    stratum = stratum_of(config.low_confidence)
    in_ranges = or_(*(and_(Result.ts >= start, Result.ts < end) for start, end in ranges))
    seed = literal(seed_of(task.name, ranges[0][0]), BigInteger)
    candidates = (
        select(
            Result.id.label("id"),
            bucket.label("bucket"),
            stratum.label("stratum"),
            draw_hash(Result.id, seed).label("h"),
        )
        .join(Payload, (Payload.result_id == Result.id) & (Payload.result_ts == Result.ts))
        .where(Result.task_id == task.id, in_ranges, bucket.in_(buckets), stratum.is_not(None))
        .cte("candidates")
    )
    counts: dict[Cell, int] = {
        (b, s): int(k)
        for b, s, k in session.execute(
            select(candidates.c.bucket, candidates.c.stratum, func.count()).group_by(
                candidates.c.bucket, candidates.c.stratum
            )
        )
    }
    wanted = regression_allocation(n, counts, breaching, buckets)
    if not wanted:
        return 0
    ranked = select(
        candidates.c.id,
        candidates.c.bucket,
        candidates.c.stratum,
        func.row_number()
        .over(
            partition_by=(candidates.c.bucket, candidates.c.stratum),
            order_by=(candidates.c.h, candidates.c.id),
        )
        .label("rank"),
    ).subquery()
    share = case(
        *(
            (and_(ranked.c.bucket == b, ranked.c.stratum == s), literal(k))
            for (b, s), k in wanted.items()
        ),
        else_=literal(0),
    )
    chosen: dict[int, Cell] = {
        int(rid): (b, s)
        for rid, b, s in session.execute(
            select(ranked.c.id, ranked.c.bucket, ranked.c.stratum).where(ranked.c.rank <= share)
        )
    }
    found: list[Row[Any]] = []
    ids = sorted(chosen)
    for i in range(0, len(ids), CHUNK):
        found += session.execute(
            select(*item_fields())
            .join(Payload, (Payload.result_id == Result.id) & (Payload.result_ts == Result.ts))
            .where(Result.task_id == task.id, in_ranges, Result.id.in_(ids[i : i + CHUNK]))
            .order_by(Result.id)
        ).all()
    hot = set(breaching)
    rows = []
    moves: dict[tuple[int, int], list[str]] = {}
    for row in found:
        b, s = chosen[row.id]
        priority = PRIORITY_BREACHING if b in hot else PRIORITY_REGRESSION
        span = next(k for k, (start, end) in enumerate(ranges) if start <= row.ts < end)
        moves.setdefault((priority, span), []).append(row.request_id)
        rows.append(
            item_row(
                row,
                task_id=task.id,
                bucket=b,
                stratum=s,
                window=window_start(row.ts, config.window_seconds),
                reason="regression",
                layer="regression",
                probability=wanted[(b, s)] / counts[(b, s)] * row.keep_probability,
                provenance=_provenance(decision_id, rule, cell, ranges[span]),
                reviews_needed=config.review.reviewers_per_item,
                now=now,
            )
            | {"priority": priority}
        )
    moved = _move(session, task, moves, decision_id, rule, cell, ranges)
    done = len(moved) + insert_items(session, rows)
    session.flush()
    return done


def _move(
    session: Session,
    task: Task,
    moves: Mapping[tuple[int, int], list[str]],
    decision_id: int,
    rule: str,
    cell: str,
    ranges: Sequence[tuple[datetime, datetime]],
) -> list[int]:
    """Move the drawn results' items of other layers to `regression`; their ids. An item
    an earlier rollback put in `regression` keeps that rollback's provenance."""
    moved: list[int] = []
    for (priority, span), request_ids in sorted(moves.items()):
        for i in range(0, len(request_ids), CHUNK):
            moved += session.scalars(
                update(ReviewItem)
                .where(
                    ReviewItem.task_id == task.id,
                    ReviewItem.layer != "regression",
                    ReviewItem.request_id.in_(request_ids[i : i + CHUNK]),
                )
                .values(
                    layer="regression",
                    priority=priority,
                    provenance=_provenance(decision_id, rule, cell, ranges[span]),
                )
                .returning(ReviewItem.id)
                .execution_options(synchronize_session=False)
            ).all()
    return moved


def _provenance(
    decision_id: int, rule: str, cell: str, span: tuple[datetime, datetime]
) -> dict[str, Any]:
    return {
        "decision_id": decision_id,
        "rule": rule,
        "cell": cell,
        "window_start": _iso(span[0]),
        "window_end": _iso(span[1]),
    }


def _merged(ranges: Iterable[tuple[datetime, datetime]]) -> list[tuple[datetime, datetime]]:
    """The ranges in time order, as given (pools of a firing do not overlap; a duplicate
    range is read once)."""
    return sorted(set(ranges))


def _iso(ts: datetime) -> str:
    return ts.isoformat().replace("+00:00", "Z")
