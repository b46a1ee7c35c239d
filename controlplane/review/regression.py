"""The regression layer: a rollback queues the reviewable results of its breaching windows
for review, in the firing's own transaction, and moves those already queued to that layer
(docs/review.md, "Regression").
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from controlplane.catalog.schemas import TaskConfig
from controlplane.ingest.buckets import bucket_labels
from controlplane.metrics.fields import ALL
from controlplane.metrics.repository import bucket_of
from controlplane.metrics.windows import window_start
from controlplane.models import Payload, Result, ReviewItem, Task
from controlplane.models.base import utcnow
from controlplane.review.sampler import insert_items, item_fields, item_row, stratum_of


def judged_bucket_labels(config: TaskConfig) -> list[str]:
    """The buckets holding inputs the edge may serve: the rule's `all` cell (the same
    buckets as controlplane.rollout.policy.judged_buckets, which this layer cannot import)."""
    labels = bucket_labels(config.length_buckets)
    cap = config.max_input_tokens
    if cap is None:
        return labels
    starts = [0, *config.length_buckets]
    return [label for label, lo in zip(labels, starts, strict=True) if lo <= cap]


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
    """Queue the results of a rollback's breaching windows (cell `all` = the judged buckets)
    for the `regression` layer, in the caller's (the firing's) transaction: every result
    with a kept payload that a reviewer can judge, reason `regression`, inclusion
    probability its keep probability, provenance naming the decision, rule, cell and
    window. A result already queued is moved to the `regression` layer with that
    provenance (it stays one item, with its own reason and probability). Returns how many
    items were queued or moved. Under `payload_policy: none` there is nothing to queue."""
    if config.payload_policy == "none":
        return 0
    now = now or utcnow()
    bucket = bucket_of(Result.input_tokens, config.length_buckets)
    in_cell = bucket == cell if cell != ALL else bucket.in_(judged_bucket_labels(config))
    stratum = stratum_of(config.low_confidence)
    done = 0
    for start, end in _merged(ranges):
        provenance = {
            "decision_id": decision_id,
            "rule": rule,
            "cell": cell,
            "window_start": _iso(start),
            "window_end": _iso(end),
        }
        where = [
            Result.task_id == task.id,
            Result.ts >= start,
            Result.ts < end,
            in_cell,
            stratum.is_not(None),
        ]
        in_range = select(Result.request_id).join(
            Payload, (Payload.result_id == Result.id) & (Payload.result_ts == Result.ts)
        )
        moved = session.execute(
            update(ReviewItem)
            .where(
                ReviewItem.task_id == task.id,
                ReviewItem.layer != "regression",
                ReviewItem.request_id.in_(in_range.where(*where)),
            )
            .values(layer="regression", provenance=provenance)
            .execution_options(synchronize_session=False)
        )
        done += moved.rowcount  # type: ignore[attr-defined]
        found = session.execute(
            select(*item_fields(), bucket.label("bucket"), stratum.label("stratum"))
            .join(Payload, (Payload.result_id == Result.id) & (Payload.result_ts == Result.ts))
            .where(*where)
            .order_by(Result.id)
        ).all()
        rows = [
            item_row(
                row,
                task_id=task.id,
                bucket=row.bucket,
                stratum=row.stratum,
                window=window_start(row.ts, config.window_seconds),
                reason="regression",
                layer="regression",
                probability=row.keep_probability,
                provenance=provenance,
                reviews_needed=config.review.reviewers_per_item,
                now=now,
            )
            for row in found
        ]
        done += insert_items(session, rows)
    session.flush()
    return done


def _merged(ranges: Iterable[tuple[datetime, datetime]]) -> list[tuple[datetime, datetime]]:
    """The ranges in time order, as given (pools of a firing do not overlap; a duplicate
    range is read once)."""
    return sorted(set(ranges))


def _iso(ts: datetime) -> str:
    return ts.isoformat().replace("+00:00", "Z")
