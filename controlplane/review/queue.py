"""The review queue inside a transaction: claim an item under a lease, label it, release or
skip it. The caller owns the transaction (controlplane.review.actions).

An item is claimable when it is queued, nobody holds an unexpired lease on it, and the
reviewer has neither labelled nor skipped it. A reviewer who asks again while holding a
lease gets the same item back with the lease renewed (a reloaded page does not grab a
second item). A label needs the reviewer's unexpired lease: a lease that expired may
already be someone else's, so a late label is refused (409) instead of silently counted.

When an item has labels from `reviews_needed` different reviewers it is done — unless
their votes disagree and it has not had its extra reviewer yet: then it needs one more
(`reviews_needed` + 1) and goes back to the queue for someone who has not seen it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from controlplane.catalog.schemas import FAILURE_CLASS
from controlplane.compare.jsonutil import dumps
from controlplane.errors import ActionError
from controlplane.models import ReviewSkip
from controlplane.review import repository
from controlplane.review.labels import LabelError, consensus, resolve, votes

# Bounds on what a label carries (the API bounds its body the same way).
MAX_NOTE = 2000
MAX_REASON = 500
# A correction is an answer, not a document: 64 KiB of JSON.
MAX_CORRECTED = 65536


def claim(
    session: Session,
    task_id: int | None,
    reviewer: str,
    now: datetime,
    lease_seconds: float,
) -> Any:
    """The item the reviewer now holds (lease until now + lease_seconds) — the columns the
    blind view reads — or None when nothing is claimable. Two statements at most: renew
    the lease the reviewer holds, else take the oldest claimable item."""
    expires = now + timedelta(seconds=lease_seconds)
    held = repository.renew_lease(session, task_id, reviewer, now, expires)
    if held is not None:
        return held
    return repository.take_next(session, task_id, reviewer, now, expires)


@dataclass(frozen=True, slots=True)
class Labelled:
    label_id: int
    resolved: str
    state: str
    reviews_needed: int
    reviewers: int
    disagreement: bool


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
) -> Labelled:
    """Store the reviewer's label on the item they hold, free the lease, and mark the item
    done or send it to one more reviewer. `locked`: the item's lease row, if the caller
    locked it (repository.locked_item)."""
    if locked is None:
        locked = repository.locked_item(session, item_id)
    item = check_lease(locked, item_id, reviewer, now)
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
        try:
            size = len(dumps(corrected))
        except (TypeError, ValueError):
            raise ActionError(422, "corrected: not a JSON value this server can store") from None
        if size > MAX_CORRECTED:
            raise ActionError(422, f"corrected: at most {MAX_CORRECTED} bytes of JSON, got {size}")
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
    needed, state, done_at = item.reviews_needed, "queued", None
    if needed == 1:
        # One reviewer needed (never extended): nobody else labelled it, so this one vote
        # decides it.
        voters, disagreement = 1, False
    else:
        labels = repository.item_labels(session, item.id)
        voters = len(votes(labels))
        agreed = consensus(labels)
        disagreement = agreed is not None and agreed.disagreement
    if voters >= needed:
        # One extra reviewer, once: the item's own count says whether it had it.
        if disagreement and needed <= reviewers_per_item:
            needed = voters + 1
        else:
            state, done_at = "done", now
    repository.end_lease(session, item.id, state=state, done_at=done_at, reviews_needed=needed)
    return Labelled(label_id, resolved, state, needed, voters, disagreement)


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
