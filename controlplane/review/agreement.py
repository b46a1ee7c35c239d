"""Reviewers' agreement on a task's labels (docs/route-accuracy.md): Krippendorff's alpha
(nominal, the `krippendorff` package) over every item two or more reviewers labelled, and
Cohen's kappa for each pair of reviewers on the items they both labelled.

A reviewer's vote on an item is their newest label (`labels.votes`), taken as resolved to
the sides (so `a_correct` on one item and `b_correct` on another can be the same verdict);
`unclear` is a vote like any other here: two reviewers of whom one finds an item clear and
the other does not disagree about it. Low agreement says the labels, and the route
accuracy built on them, are noisy: the guideline or the task needs attention.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import combinations
from typing import Any

import krippendorff
import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.models import ReviewLabel
from controlplane.review.labels import LabelLike, votes


@dataclass(frozen=True, slots=True)
class PairKappa:
    reviewers: tuple[str, str]
    items: int
    observed: float
    kappa: float | None


@dataclass(frozen=True, slots=True)
class Agreement:
    # Items with two or more reviewers' votes, and the reviewers who cast them.
    items: int
    reviewers: tuple[str, ...]
    alpha: float | None
    # Share of those items on which every vote is the same.
    unanimous: float | None
    # Cohen's kappa per pair of reviewers with items in common.
    pairs: tuple[PairKappa, ...]
    # The one kappa when exactly two reviewers labelled the shared items, else None.
    kappa: float | None
    note: str | None = None


def cohen_kappa(first: Sequence[str], second: Sequence[str]) -> tuple[float, float | None]:
    """(observed agreement, Cohen's kappa) of two raters' votes on the same items; kappa is
    None when chance alone agrees fully (both always gave one and the same verdict)."""
    n = len(first)
    if n == 0 or n != len(second):
        raise ValueError("two equally long, non-empty vote lists are needed")
    observed = sum(a == b for a, b in zip(first, second, strict=True)) / n
    left, right = Counter(first), Counter(second)
    expected = sum(left[v] * right[v] for v in left) / (n * n)
    if expected >= 1.0:
        return observed, None
    return observed, (observed - expected) / (1.0 - expected)


def krippendorff_alpha(items: Iterable[Sequence[str]]) -> float | None:
    """Nominal alpha of items' votes (each item: the verdicts of its reviewers, two or more);
    None when the items hold fewer than two verdicts in all."""
    rows = [list(v) for v in items if len(v) >= 2]
    domain = sorted({v for row in rows for v in row})
    if not rows or len(domain) < 2:
        return None
    index = {v: k for k, v in enumerate(domain)}
    counts = np.zeros((len(rows), len(domain)), dtype=np.int64)
    for r, row in enumerate(rows):
        for v in row:
            counts[r, index[v]] += 1
    return float(krippendorff.alpha(value_counts=counts, level_of_measurement="nominal"))


def agreement(by_item: Mapping[int, Sequence[LabelLike]]) -> Agreement:
    """Agreement of the reviewers over items' labels (item id → its labels)."""
    shared: dict[int, dict[str, str]] = {}
    for item_id, labels in by_item.items():
        cast = {v.reviewer: v.resolved for v in votes(labels)}
        if len(cast) >= 2:
            shared[item_id] = cast
    reviewers = tuple(sorted({r for cast in shared.values() for r in cast}))
    if not shared:
        return Agreement(
            0,
            (),
            None,
            None,
            (),
            None,
            note="no item has labels from two reviewers yet (review.reviewers_per_item > 1 "
            "or a disagreement sends items to more reviewers)",
        )
    alpha = krippendorff_alpha(list(cast.values()) for cast in shared.values())
    unanimous = sum(len(set(c.values())) == 1 for c in shared.values()) / len(shared)
    # Each item adds its votes to the pairs of its own reviewers: the work grows with the
    # items (times the few reviewers each has), not with reviewers² × items.
    common: dict[tuple[str, str], tuple[list[str], list[str]]] = {}
    for cast in shared.values():
        for a, b in combinations(sorted(cast), 2):
            left, right = common.setdefault((a, b), ([], []))
            left.append(cast[a])
            right.append(cast[b])
    pairs = []
    for pair, (left, right) in sorted(common.items()):
        observed, kappa = cohen_kappa(left, right)
        pairs.append(PairKappa(pair, len(left), observed, kappa))
    kappa = pairs[0].kappa if len(reviewers) == 2 and pairs else None
    note = None
    if alpha is None:
        note = "every vote on the shared items is the same verdict: agreement is perfect but "
        note += "chance-corrected measures are undefined"
    return Agreement(len(shared), reviewers, alpha, unanimous, tuple(pairs), kappa, note)


@dataclass(slots=True)
class _Vote:
    """What agreement reads of a label (not its correction or note, which may be long)."""

    id: int
    reviewer: str
    resolved: str
    failure_class: str | None
    created_at: datetime
    corrected: Any = None


# Agreement is read from the task's newest labels, at most this many: enough for any
# estimate to settle, and a read endpoint stays as fast in year two as in week one.
MAX_LABELS = 50_000


def task_agreement(session: Session, task_id: int) -> dict[str, Any]:
    """The task's reviewer agreement, as the API answers it (over its newest labels)."""
    by_item: dict[int, list[_Vote]] = {}
    rows = session.execute(
        select(
            ReviewLabel.item_id,
            ReviewLabel.id,
            ReviewLabel.reviewer,
            ReviewLabel.resolved,
            ReviewLabel.failure_class,
            ReviewLabel.created_at,
        )
        .where(ReviewLabel.task_id == task_id)
        .order_by(ReviewLabel.id.desc())
        .limit(MAX_LABELS)
    ).all()
    for item_id, label_id, reviewer, resolved, failure_class, created_at in reversed(rows):
        by_item.setdefault(item_id, []).append(
            _Vote(label_id, reviewer, resolved, failure_class, created_at)
        )
    found = agreement(by_item)
    note = found.note
    if len(rows) == MAX_LABELS:
        capped = f"computed over the newest {MAX_LABELS} labels"
        note = f"{note}; {capped}" if note else capped
    return {
        "items": found.items,
        "reviewers": list(found.reviewers),
        "alpha": found.alpha,
        "kappa": found.kappa,
        "unanimous": found.unanimous,
        "pairs": [
            {
                "reviewers": list(p.reviewers),
                "items": p.items,
                "observed": p.observed,
                "kappa": p.kappa,
            }
            for p in found.pairs
        ],
        "note": note,
    }
