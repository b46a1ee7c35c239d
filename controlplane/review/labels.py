"""What labels mean (pure): a reviewer's verdict resolved to the sides, and the consensus of
an item's reviewers that route accuracy, calibration and eval sets read.

Pair verdicts are given in A/B terms (`a_correct`, `b_correct`, `both_correct`,
`both_wrong`, `unclear`) and stored resolved to the sides (`edge_correct`,
`cloud_correct`, ...) with the item's hidden order; single-answer items ("is this answer
right?", the answer shown being the cloud's) take `correct`, `wrong`, `unclear`.

Labels are never edited: each reviewer's newest label on an item is their vote. The
consensus is the verdict most of the votes that are not `unclear` give; none, or a tie,
is `unclear` (a tie is what sends an item to one more reviewer).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

PAIR_VERDICTS = ("a_correct", "b_correct", "both_correct", "both_wrong", "unclear")
SINGLE_VERDICTS = ("correct", "wrong", "unclear")
# Resolved pair verdicts whose edge answer was right: the right route was the edge.
EDGE_RIGHT = ("edge_correct", "both_correct")


class LabelError(ValueError):
    """A verdict that does not fit the item; the message names the field and what is allowed."""


def resolve(verdict: str, *, kind: str, a_is_edge: bool) -> str:
    """The verdict in terms of the sides (pairs) or as given (singles)."""
    if kind == "single":
        if verdict not in SINGLE_VERDICTS:
            raise LabelError(
                f"verdict: {verdict!r} is not a verdict for a single answer; "
                f"one of {', '.join(SINGLE_VERDICTS)}"
            )
        return verdict
    if verdict not in PAIR_VERDICTS:
        raise LabelError(
            f"verdict: {verdict!r} is not a verdict for a pair; one of {', '.join(PAIR_VERDICTS)}"
        )
    if verdict == "a_correct":
        return "edge_correct" if a_is_edge else "cloud_correct"
    if verdict == "b_correct":
        return "cloud_correct" if a_is_edge else "edge_correct"
    return verdict


class LabelLike(Protocol):
    id: int
    reviewer: str
    resolved: str
    failure_class: str | None
    corrected: Any
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Consensus:
    # edge_correct | cloud_correct | both_correct | both_wrong | correct | wrong | unclear
    resolved: str
    failure_class: str | None
    corrected: Any
    # The votes counted: each reviewer's newest label, oldest reviewer first.
    reviewers: tuple[str, ...]
    label_ids: tuple[int, ...]
    # Whether the votes that are not `unclear` disagree.
    disagreement: bool


def votes(labels: Sequence[LabelLike]) -> list[LabelLike]:
    """Each reviewer's newest label (by id), in the order the reviewers first labelled."""
    newest: dict[str, LabelLike] = {}
    for label in sorted(labels, key=lambda lab: lab.id):
        newest[label.reviewer] = label
    return list(newest.values())


def consensus(labels: Sequence[LabelLike]) -> Consensus | None:
    """The item's verdict from its labels; None without labels."""
    counted = votes(labels)
    if not counted:
        return None
    clear = [v for v in counted if v.resolved != "unclear"]
    tally = Counter(v.resolved for v in clear).most_common()
    disagreement = len(tally) > 1
    if not tally or (len(tally) > 1 and tally[0][1] == tally[1][1]):
        resolved = "unclear"
        backing = counted
    else:
        resolved = tally[0][0]
        backing = [v for v in clear if v.resolved == resolved]
    newest_first = sorted(backing, key=lambda lab: lab.id, reverse=True)
    classes = Counter(v.failure_class for v in backing if v.failure_class)
    failure_class = None
    if classes:
        top = classes.most_common(1)[0][1]
        failure_class = next(
            v.failure_class
            for v in newest_first
            if v.failure_class and classes[v.failure_class] == top
        )
    corrected = next((v.corrected for v in newest_first if v.corrected is not None), None)
    return Consensus(
        resolved=resolved,
        failure_class=failure_class,
        corrected=corrected,
        reviewers=tuple(v.reviewer for v in counted),
        label_ids=tuple(v.id for v in counted),
        disagreement=disagreement,
    )
