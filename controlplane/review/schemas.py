"""What the review API reads and answers."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# Pair verdicts (A/B terms) and single-answer verdicts (controlplane.review.labels).
Verdict = Literal[
    "a_correct", "b_correct", "both_correct", "both_wrong", "unclear", "correct", "wrong"
]


class BlindItemOut(BaseModel):
    """A claimed item as a reviewer sees it: nothing names the edge or the cloud side."""

    id: int
    task: str
    # pair: `a` and `b` in an order drawn per item; single: is `a` right? (`b` is null)
    kind: Literal["pair", "single"]
    input: Any
    a: Any
    b: Any
    # The comparator's findings in terms of A and B; null for single items and agreements.
    diff: dict[str, Any] | None
    lease_expires_at: datetime


class NextOut(BaseModel):
    item: BlindItemOut


class LabelIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    verdict: Verdict
    # A short class name for what the wrong answer got wrong: `amount`, `wrong_language`.
    failure_class: str | None = Field(None, max_length=64)
    # The right answer, when neither was (`both_wrong`, `wrong`) or it is unclear.
    corrected: Any = None
    note: str | None = Field(None, max_length=2000)


class LabelOut(BaseModel):
    item: int
    label: int
    # done, or queued when it waits for more reviewers
    state: Literal["queued", "done"]
    reviews_needed: int
    reviewers: int


class ReleaseIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # A skip (or any reason) means the item is never offered to this reviewer again.
    skip: bool = False
    reason: str | None = Field(None, max_length=500)


class ReleaseOut(BaseModel):
    item: int
    skipped: bool
    state: Literal["queued", "done"]


class QueueRowOut(BaseModel):
    task: str
    # Free to claim; held under an unexpired lease; labels given today (UTC); finished.
    queued: int
    claimed: int
    labelled_today: int
    done: int
    has_queue: bool
    # Why a task has no queue (payload_policy none), else null.
    note: str | None


class QueueOut(BaseModel):
    tasks: list[QueueRowOut]
