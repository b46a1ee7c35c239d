"""The review queue inside a transaction: claim an item under a lease, label it, release or
skip it. The caller owns the transaction (controlplane.review.actions).

An item is claimable when it is queued, nobody holds an unexpired lease on it, and the
reviewer has neither labelled nor skipped it. A reviewer who asks again while holding a
lease gets the same item back with the lease renewed (a reloaded page does not grab a
second item). A label needs the reviewer's unexpired lease: a lease that expired may
already be someone else's, so a late label is refused (409) instead of silently counted.

When an item has labels from `reviews_needed` different reviewers it is done — unless
their votes disagree and it has not had its extra reviewer yet, or it is a regression item
whose votes give no usable expected answer (at most ANSWER_REVIEWERS extra reviewers):
then it needs one more (`reviews_needed` + 1) and goes back to the queue for someone who
has not seen it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from controlplane.catalog.schemas import FAILURE_CLASS
from controlplane.compare.comparators import compare
from controlplane.compare.jsonutil import dumps
from controlplane.errors import ActionError
from controlplane.models import ReviewSkip
from controlplane.models.review import PRIORITY_OTHER
from controlplane.review import repository
from controlplane.review.blind import shown_answers, stored_numbering
from controlplane.review.labels import (
    CALLED_RIGHT,
    Consensus,
    LabelError,
    consensus,
    contradiction,
    resolve,
    usable_answer,
    votes,
    why_not_accepted,
    wrong_correction,
)

# Bounds on what a label carries (the API bounds its body the same way).
MAX_NOTE = 2000
MAX_REASON = 500
# A correction is an answer, not a document: 64 KiB of JSON.
MAX_CORRECTED = 65536
# Corrections a reviewer may make of their own label on one item (labels after the first).
MAX_CORRECTIONS = 3
# Verdicts that already name a right answer: a correction beside them would contradict them.
RIGHT_VERDICTS = ("a_correct", "b_correct", "both_correct", "correct")
# A regression item whose votes give no usable expected answer goes to at most this many
# reviewers more than review.reviewers_per_item, one at a time (`one_more`).
ANSWER_REVIEWERS = 2


def claim(
    session: Session,
    task_id: int | None,
    reviewer: str,
    now: datetime,
    lease_seconds: float,
    exclude: Sequence[int] = (),
) -> Any:
    """The item the reviewer now holds (lease until now + lease_seconds) — the columns the
    blind view reads — or None when nothing is claimable. A reviewer holds one lease at
    most: the item they already hold (of any task, whatever `task_id` asks) is renewed and
    returned, else the oldest claimable item is taken. The reviewer's claims are
    serialized (repository.lock_reviewer), so parallel claims cannot take two. Items of
    the tasks in `exclude` are neither renewed nor taken."""
    expires = now + timedelta(seconds=lease_seconds)
    repository.lock_reviewer(session, reviewer)
    held = repository.renew_lease(session, reviewer, now, expires, exclude)
    if held is not None:
        return held
    return repository.take_next(session, task_id, reviewer, now, expires, exclude)


@dataclass(frozen=True, slots=True)
class Labelled:
    label_id: int
    resolved: str
    state: str
    reviews_needed: int
    reviewers: int
    disagreement: bool
    # A reviewer's newer label on an item they had labelled (no lease needed).
    correction: bool = False


def check_lease(item: Any, item_id: int, reviewer: str, now: datetime) -> Any:
    """The item (a row of repository.LEASE_COLUMNS) if the reviewer holds its unexpired
    lease; else 404 or 409 saying why."""
    if item is None:
        raise ActionError(404, f"review item {item_id}: no such item")
    if item.claimed_by != reviewer:
        raise ActionError(
            409,
            f"review item {item_id}: you do not hold its lease (it expired or was never "
            "yours); claim an item again with GET /v1/review/next",
        )
    if item.lease_expires_at is None or item.lease_expires_at <= now:
        expired = item.lease_expires_at.isoformat() if item.lease_expires_at else "unknown"
        raise ActionError(
            409,
            f"review item {item_id}: your lease expired at {expired}; claim an item again "
            "with GET /v1/review/next",
        )
    return item


def label(
    session: Session,
    item_id: int,
    reviewer: str,
    *,
    verdict: str,
    failure_class: str | None,
    corrected: Any,
    note: str | None,
    now: datetime,
    reviewers_per_item: int,
    locked: Any = None,
    comparator_spec: Mapping[str, Any] | None = None,
) -> Labelled:
    """Store the reviewer's label on the item they hold, free the lease, and mark the item
    done or send it to one more reviewer. `locked`: the item's lease row, if the caller
    locked it (repository.locked_item). `comparator_spec`: the task's comparator, which
    a correction must be a valid answer of and a pair verdict may not contradict
    (labels.contradiction: 422 with the reason, a correction of one's label alike), nor a
    correction equal an answer its verdict calls wrong (labels.wrong_correction).

    A reviewer who already labelled the item may label it again without a lease: their
    correction, which supersedes their earlier label (each reviewer's newest label is
    their vote), at most MAX_CORRECTIONS times per item (409 after that). It leaves the
    item's lease alone; a correction that makes a done item's votes disagree reopens it for
    one more reviewer, as a first disagreement does, unless it already had its extra one."""
    if locked is None:
        locked = repository.locked_item(session, item_id)
    correction = False
    try:
        item = check_lease(locked, item_id, reviewer, now)
    except ActionError as exc:
        if exc.status != 409 or not repository.has_label(session, item_id, reviewer):
            raise
        item, correction = locked, True
        made = repository.label_count(session, item_id, reviewer) - 1
        if made >= MAX_CORRECTIONS:
            raise ActionError(
                409,
                f"review item {item_id}: you already corrected your label {made} times, the "
                f"limit is {MAX_CORRECTIONS} corrections per reviewer and item",
            ) from None
    try:
        resolved = resolve(verdict, kind=item.kind, a_is_edge=item.a_is_edge)
    except LabelError as exc:
        raise ActionError(422, str(exc)) from None
    if failure_class is not None and not FAILURE_CLASS.fullmatch(failure_class):
        raise ActionError(
            422,
            "failure_class: must start with a lowercase letter and hold only a-z, 0-9, "
            f"'_', '.', '-' (at most 64 characters), got {failure_class[:80]!r}",
        )
    if note is not None and len(note) > MAX_NOTE:
        raise ActionError(422, f"note: at most {MAX_NOTE} characters, got {len(note)}")
    if corrected is not None:
        if not _finite(corrected):
            raise ActionError(
                422,
                "corrected: holds a number that is not finite (NaN, Infinity or out of "
                "range), which JSON cannot store",
            )
        try:
            size = len(dumps(corrected))
        except (TypeError, ValueError):
            raise ActionError(422, "corrected: not a JSON value this server can store") from None
        if size > MAX_CORRECTED:
            raise ActionError(422, f"corrected: at most {MAX_CORRECTED} bytes of JSON, got {size}")
        check_corrected(corrected, verdict, comparator_spec)
    pair = item.kind == "pair" and comparator_spec is not None and verdict in CALLED_RIGHT
    shown = repository.view_row(session, item.id) if pair or corrected is not None else None
    # The verdict and the correction are judged against the answers as the reviewer saw
    # them, and a refusal quotes them so: under `redacted` the stored text's placeholder
    # numbers follow the sides (the masker numbers the edge's answer first).
    a, b = shown_answers(shown) if shown is not None else (None, None)
    if pair and shown is not None:
        refused = contradiction(verdict, comparator_spec, a, b)
        if refused is not None:
            raise ActionError(422, refused)
    if corrected is not None and shown is not None:
        refused = wrong_correction(verdict, comparator_spec, corrected, a, b)
        if refused is not None:
            raise ActionError(422, refused)
        # The reviewer wrote it against the blind view, whose placeholders are renumbered:
        # store it with the numbers of the item's stored text, which it is kept beside.
        try:
            corrected = stored_numbering(shown, corrected)
        except ValueError as exc:
            raise ActionError(422, f"corrected: {exc}") from None
    label_id = repository.add_label(
        session,
        item_id=item.id,
        task_id=item.task_id,
        reviewer=reviewer,
        verdict=verdict,
        resolved=resolved,
        failure_class=failure_class,
        corrected=corrected,
        note=note,
        created_at=now,
    )
    if correction:
        labels = repository.item_labels(session, item.id)
        agreed = consensus(labels)
        voters = len(votes(labels))
        disagreement = agreed is not None and agreed.disagreement
        state, needed = item.state, item.reviews_needed
        if state == "done" and one_more(
            session, item, agreed, needed, reviewers_per_item, comparator_spec
        ):
            # The correction made the votes disagree, or took a regression item's expected
            # answer away: one more reviewer, as when that came first.
            state, needed = "queued", voters + 1
            repository.reopen(session, item.id, reviews_needed=needed)
        return Labelled(label_id, resolved, state, needed, voters, disagreement, correction=True)
    needed, state, done_at = item.reviews_needed, "queued", None
    agreed = None
    if needed == 1 and not awaited(item):
        # One reviewer needed (never extended): nobody else labelled it, so this one vote
        # decides it.
        voters, disagreement = 1, False
    else:
        labels = repository.item_labels(session, item.id)
        voters = len(votes(labels))
        agreed = consensus(labels)
        disagreement = agreed is not None and agreed.disagreement
    if voters >= needed:
        if one_more(session, item, agreed, needed, reviewers_per_item, comparator_spec):
            needed = voters + 1
        else:
            state, done_at = "done", now
    repository.end_lease(session, item.id, state=state, done_at=done_at, reviews_needed=needed)
    return Labelled(label_id, resolved, state, needed, voters, disagreement)


def awaited(item: Any) -> bool:
    """Whether a block may wait on the item for an expected answer: a regression item that
    keeps its regression priority (it drops to PRIORITY_OTHER once no block waits on it, or
    its input is in the regression set already)."""
    return bool(item.layer == "regression" and item.priority < PRIORITY_OTHER)


def one_more(
    session: Session,
    item: Any,
    agreed: Consensus | None,
    needed: int,
    reviewers_per_item: int,
    spec: Mapping[str, Any] | None,
) -> bool:
    """Whether an item whose votes (`agreed`) reached `needed` goes back to the queue for
    one more reviewer. Once when the votes disagree: the item's own count says whether it
    had its extra reviewer. And a regression item a block waits on for an expected answer
    (`awaited`), while its votes give no usable one (labels.usable_answer), up to
    ANSWER_REVIEWERS more than `reviewers_per_item`: then it stays done without one."""
    if agreed is not None and agreed.disagreement and needed <= reviewers_per_item:
        return True
    if not awaited(item) or needed >= reviewers_per_item + ANSWER_REVIEWERS:
        return False
    stored = repository.view_row(session, item.id)
    return stored is not None and not usable_answer(
        agreed, spec, stored.edge_output, stored.cloud_output
    )


def _finite(value: Any) -> bool:
    """Whether every number in the JSON value is finite."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    return True


def check_corrected(corrected: Any, verdict: str, spec: Mapping[str, Any] | None) -> None:
    """422 unless the correction may stand: only beside a verdict that names no right
    answer, and an output the task's comparator accepts (it agrees with itself), since it
    becomes the expected answer runs are scored against."""
    if verdict in RIGHT_VERDICTS:
        raise ActionError(
            422,
            f"corrected: not allowed with verdict {verdict!r}, which already names a right "
            "answer; give a correction with both_wrong, wrong or unclear",
        )
    if spec is None:
        return
    found = compare(spec, corrected, corrected)
    if found.outcome != "agree":
        raise ActionError(
            422,
            f"corrected: not an answer the task's {spec.get('kind')} comparator accepts "
            f"({why_not_accepted(found.diff)})",
        )


def release(
    session: Session,
    item_id: int,
    reviewer: str,
    *,
    skip: bool,
    reason: str | None,
    now: datetime,
) -> Any:
    """Free the item the reviewer holds; a skip also records that they passed on it (with
    the reason), so it is never offered to them again."""
    item = check_lease(repository.locked_item(session, item_id), item_id, reviewer, now)
    if reason is not None and len(reason) > MAX_REASON:
        raise ActionError(422, f"reason: at most {MAX_REASON} characters, got {len(reason)}")
    repository.end_lease(session, item.id)
    if skip:
        session.add(ReviewSkip(item_id=item.id, reviewer=reviewer, reason=reason, created_at=now))
        session.flush()
    return item
