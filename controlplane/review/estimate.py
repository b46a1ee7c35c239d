"""Route accuracy from labelled pairs (docs/route-accuracy.md). Pure.

Items are drawn with unequal probabilities, so each labelled pair is weighted by
1/inclusion probability (Hájek's ratio estimator); the interval is Wilson's on Kish's
effective sample size, which is also what the rollback rule counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from controlplane.metrics.stats import wilson
from controlplane.review.labels import EDGE_RIGHT


@dataclass(frozen=True, slots=True)
class LabelledPair:
    # The router's decision (edge | cloud), the item's consensus (`Consensus.resolved`), its
    # inclusion probability and the consensus failure class.
    decision: str
    resolved: str
    inclusion_probability: float
    failure_class: str | None = None


@dataclass(frozen=True, slots=True)
class RouteAccuracy:
    # Pairs counted (clear consensus, positive inclusion probability) and left out as unclear.
    n_labels: int = 0
    n_unclear: int = 0
    estimate: float | None = None
    n_effective: float = 0.0
    low: float | None = None
    high: float | None = None
    # Weighted shares of the counted pairs: decided cloud while the edge was right, and
    # decided edge while the edge was wrong (together 1 - estimate).
    missed_offload: float | None = None
    wrong_offload: float | None = None
    # failure class → weighted share of the counted pairs (the labelled edge answers) whose
    # edge answer was wrong with that class. Classes named only on labels that are not
    # counted here (single answers, unclear items) appear with 0.0.
    failure_classes: dict[str, float] = field(default_factory=dict)


def edge_was_right(resolved: str) -> bool:
    return resolved in EDGE_RIGHT


def route_accuracy(
    pairs: Iterable[LabelledPair], *, other_classes: Iterable[str] = ()
) -> RouteAccuracy:
    """The weighted route accuracy of labelled pairs, with its interval and error directions.

    `other_classes`: failure classes named elsewhere in the window (listed with share 0.0
    unless the pairs give them one)."""
    total = squares = right = missed = wrong = 0.0
    by_class: dict[str, float] = dict.fromkeys(other_classes, 0.0)
    counted = unclear = 0
    for pair in pairs:
        if pair.failure_class:
            by_class.setdefault(pair.failure_class, 0.0)
        if pair.resolved == "unclear":
            unclear += 1
            continue
        if not pair.inclusion_probability > 0:
            # A weight of 1/0 is no weight: such an item cannot stand for anything.
            continue
        weight = 1.0 / min(pair.inclusion_probability, 1.0)
        counted += 1
        total += weight
        squares += weight * weight
        edge_right = edge_was_right(pair.resolved)
        if (pair.decision == "edge") == edge_right:
            right += weight
        elif pair.decision == "edge":
            wrong += weight
        else:
            missed += weight
        if not edge_right and pair.failure_class:
            by_class[pair.failure_class] += weight
    classes = dict(sorted(by_class.items()))
    if counted == 0:
        return RouteAccuracy(n_unclear=unclear, failure_classes=classes)
    estimate = right / total
    n_effective = total * total / squares
    interval = wilson(estimate * n_effective, n_effective)
    assert interval is not None
    return RouteAccuracy(
        n_labels=counted,
        n_unclear=unclear,
        estimate=estimate,
        n_effective=n_effective,
        low=interval[0],
        high=interval[1],
        missed_offload=missed / total,
        wrong_offload=wrong / total,
        failure_classes={name: share / total for name, share in classes.items()},
    )


@dataclass(frozen=True, slots=True)
class Share:
    """A weighted share: how many items, the estimate, Kish's size and Wilson on it."""

    n: int = 0
    estimate: float | None = None
    n_effective: float = 0.0
    low: float | None = None
    high: float | None = None


def weighted_share(items: Iterable[tuple[bool, float]]) -> Share:
    """The weighted share of items that hold (each: whether it holds, its inclusion
    probability); items with no positive probability are left out."""
    total = squares = hits = 0.0
    n = 0
    for holds, probability in items:
        if not probability > 0:
            continue
        weight = 1.0 / min(probability, 1.0)
        n += 1
        total += weight
        squares += weight * weight
        hits += weight if holds else 0.0
    if n == 0:
        return Share()
    estimate = hits / total
    size = total * total / squares
    interval = wilson(estimate * size, size)
    assert interval is not None
    return Share(n, estimate, size, interval[0], interval[1])
