"""Comparator calibration from labels (docs/route-accuracy.md): can a task's agreement be
trusted?

Per task, comparator and check: the precision of `conflict` (was it a real difference?)
and the miss rate of `agree` (did it hide one?), weighted by 1/inclusion probability,
with Wilson intervals on Kish's effective size. Only the sampler's draws count: a
rollback's regression sample (reason `regression`) is left out, as route accuracy leaves
it out (`accuracy.window_accuracy`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import ColumnElement, select
from sqlalchemy.orm import Session

from controlplane.models import ReviewItem, ReviewLabel
from controlplane.review.estimate import Share, weighted_share
from controlplane.review.labels import consensus


@dataclass(frozen=True, slots=True)
class Judged:
    """A labelled pair as calibration reads it."""

    comparator: str
    outcome: str | None
    diff: Any
    resolved: str
    inclusion_probability: float


def checks(comparator: str, diff: Any) -> list[str]:
    """The checks a conflict failed: text_conservation's named ones, else the comparator."""
    if comparator == "text_conservation" and isinstance(diff, dict):
        failed = diff.get("failed")
        if isinstance(failed, list) and failed:
            return [str(name) for name in failed]
    return [comparator]


def real_difference(resolved: str) -> bool:
    return resolved not in ("both_correct", "unclear")


def _share(rows: Iterable[Judged]) -> dict[str, Any]:
    found: Share = weighted_share(
        (real_difference(r.resolved), r.inclusion_probability) for r in rows
    )
    return asdict(found)


def calibrate(judged: Sequence[Judged]) -> list[dict[str, Any]]:
    """Per comparator: conflict precision overall and per check, agree miss rate."""
    by_comparator: dict[str, list[Judged]] = defaultdict(list)
    for row in judged:
        if row.resolved != "unclear":
            by_comparator[row.comparator].append(row)
    out = []
    for comparator in sorted(by_comparator):
        rows = by_comparator[comparator]
        conflicts = [r for r in rows if r.outcome == "conflict"]
        agreeing = [r for r in rows if r.outcome == "agree"]
        per_check: dict[str, list[Judged]] = defaultdict(list)
        for row in conflicts:
            for check in checks(comparator, row.diff):
                per_check[check].append(row)
        out.append(
            {
                "comparator": comparator,
                "conflict_precision": _share(conflicts),
                "agree_miss_rate": _share(agreeing),
                "checks": [
                    {"check": check, "conflict_precision": _share(per_check[check])}
                    for check in sorted(per_check)
                ],
            }
        )
    return out


def _drawn_pairs(task_id: int) -> tuple[ColumnElement[bool], ...]:
    """The items calibration reads: the task's done pairs the sampler drew. A rollback's
    regression sample (reason `regression`) is a second draw of its breaching windows on
    top of the sampler's: weighted by its own probability it would count those windows
    twice. Items the sampler drew there (moved to the regression layer, keeping their
    reason and probability) still count."""
    return (
        ReviewItem.task_id == task_id,
        ReviewItem.kind == "pair",
        ReviewItem.state == "done",
        ReviewItem.reason != "regression",
    )


def task_calibration(session: Session, task_id: int) -> list[dict[str, Any]]:
    """The task's calibration from the done pair items the sampler drew, as the API
    answers it."""
    # What calibration reads of the items: not their payload copies.
    items = {
        item_id: (comparator, outcome, diff, probability)
        for item_id, comparator, outcome, diff, probability in session.execute(
            select(
                ReviewItem.id,
                ReviewItem.comparator,
                ReviewItem.outcome,
                ReviewItem.diff,
                ReviewItem.inclusion_probability,
            ).where(*_drawn_pairs(task_id))
        )
    }
    labels: dict[int, list[ReviewLabel]] = defaultdict(list)
    if items:
        for label in session.scalars(
            select(ReviewLabel)
            .join(ReviewItem, ReviewItem.id == ReviewLabel.item_id)
            .where(*_drawn_pairs(task_id))
            .order_by(ReviewLabel.id)
        ):
            labels[label.item_id].append(label)
    judged = []
    for item_id, (comparator, outcome, diff, probability) in items.items():
        verdict = consensus(labels.get(item_id, []))
        if verdict is not None:
            judged.append(Judged(comparator, outcome, diff, verdict.resolved, probability))
    return calibrate(judged)
