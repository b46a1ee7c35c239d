"""What the review API reads and answers."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from controlplane.errors import StrictBody
from controlplane.params import JsonValue

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
    # Set when every difference shown is on a field or check that varies between two runs
    # of the same model on the same input more often than the task's noisy_field_rate.
    note: str | None = None
    # The task's review.guidelines (Markdown, written by the team), null without.
    guidelines: str | None = None
    lease_expires_at: datetime


class NextOut(BaseModel):
    item: BlindItemOut


# A reviewer's free text (a note, a skip reason): no control character but tab and line
# breaks (controlplane.review.actions.check_text refuses the others, naming the first).
REVIEW_TEXT_PATTERN = "^[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f]*$"


class LabelIn(StrictBody):
    verdict: Verdict
    # A short class name for what the wrong answer got wrong: `amount`, `wrong_language`
    # (controlplane.catalog.schemas.FAILURE_CLASS).
    failure_class: str | None = Field(
        None, json_schema_extra={"pattern": "^[a-z][a-z0-9_.-]{0,63}$"}
    )
    # The right answer, when neither was (`both_wrong`, `wrong`) or it is unclear.
    corrected: JsonValue = None
    note: str | None = Field(
        None, max_length=2000, json_schema_extra={"pattern": REVIEW_TEXT_PATTERN}
    )


class LabelOut(BaseModel):
    item: int
    label: int
    # done, or queued when it waits for more reviewers
    state: Literal["queued", "done"]
    reviews_needed: int
    reviewers: int


class ReleaseIn(StrictBody):
    # A skip (or any reason) means the item is never offered to this reviewer again.
    skip: bool = False
    reason: str | None = Field(
        None, max_length=500, json_schema_extra={"pattern": REVIEW_TEXT_PATTERN}
    )


class ReleaseOut(BaseModel):
    item: int
    skipped: bool
    state: Literal["queued", "done"]


class RegressionCountOut(BaseModel):
    """The regression items the rollback behind the task's blocks (and later ones) queued:
    labelled (done) of needed. No model is named."""

    labelled: int
    needed: int


class QueueRowOut(BaseModel):
    task: str
    # Free to claim; held under an unexpired lease; labels given today (UTC); finished.
    queued: int
    claimed: int
    labelled_today: int
    done: int
    # With an edge model blocked: its regression items labelled / needed; else null.
    regression: RegressionCountOut | None
    has_queue: bool
    # Why a task has no queue (payload_policy none), else null.
    note: str | None


class QueueOut(BaseModel):
    tasks: list[QueueRowOut]


class RouteAccuracyWindowOut(BaseModel):
    window_start: datetime
    window_end: datetime
    closed: bool
    closed_at: datetime | None
    # The weighted route accuracy, Kish's effective sample size and the Wilson interval.
    estimate: float | None
    n_effective: float
    low: float | None
    high: float | None
    # Weighted shares: decided cloud while the edge was right; decided edge while it was wrong.
    missed_offload: float | None
    wrong_offload: float | None
    # Pairs counted, and left out as unclear.
    n_labels: int
    n_unclear: int
    # failure class → weighted share of the counted pairs with that class on a wrong edge answer
    failure_classes: dict[str, float]
    config_version: int
    computed_at: datetime


class RouteAccuracyOut(BaseModel):
    task: str
    window_seconds: int
    lateness_seconds: int
    note: str | None
    windows: list[RouteAccuracyWindowOut]


class PairKappaOut(BaseModel):
    reviewers: list[str]
    items: int
    observed: float
    kappa: float | None


class AgreementOut(BaseModel):
    task: str
    # Items with votes from two or more reviewers, and those reviewers.
    items: int
    reviewers: list[str]
    # Krippendorff's alpha (nominal); Cohen's kappa when exactly two reviewers share items.
    alpha: float | None
    kappa: float | None
    unanimous: float | None
    pairs: list[PairKappaOut]
    note: str | None


class ShareOut(BaseModel):
    n: int
    estimate: float | None
    n_effective: float
    low: float | None
    high: float | None


class CheckOut(BaseModel):
    check: str
    conflict_precision: ShareOut


class ComparatorCalibrationOut(BaseModel):
    comparator: str
    conflict_precision: ShareOut
    agree_miss_rate: ShareOut
    checks: list[CheckOut]


class CalibrationOut(BaseModel):
    task: str
    note: str | None
    comparators: list[ComparatorCalibrationOut]
