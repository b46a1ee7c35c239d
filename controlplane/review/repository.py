"""The review queue's SQL: claimable items, leases, labels, skips and counts, and the
repeat differences of a task's recent windows (its noisy fields, for the blind note)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, Row, and_, case, exists, func, insert, or_, select, update
from sqlalchemy.orm import Session

from controlplane.metrics.fields import ALL
from controlplane.models import (
    BlockedModel,
    Decision,
    ReviewItem,
    ReviewLabel,
    ReviewSkip,
    Task,
    TaskConfigVersion,
    Window,
    WindowMetrics,
)
from controlplane.models.review import PRIORITY_OTHER, PRIORITY_REGRESSION

# The order the queue hands items out in (the claim indexes' order): by priority
# (models.review.PRIORITY_*), then oldest first.
HAND_OUT_ORDER = (ReviewItem.priority, ReviewItem.id)

# What the blind view reads of a claimed item.
VIEW_COLUMNS = (
    ReviewItem.id,
    ReviewItem.task_id,
    ReviewItem.kind,
    ReviewItem.a_is_edge,
    ReviewItem.input,
    ReviewItem.edge_output,
    ReviewItem.cloud_output,
    ReviewItem.diff,
    ReviewItem.lease_expires_at,
    ReviewItem.policy,
    ReviewItem.comparator,
)


def view_row(session: Session, item_id: int) -> Row[Any] | None:
    """The columns the blind view reads of the item."""
    return session.execute(select(*VIEW_COLUMNS).where(ReviewItem.id == item_id)).first()


def lock_reviewer(session: Session, reviewer: str) -> None:
    """Serialize the reviewer's claims until the transaction ends, so parallel claims of
    one reviewer cannot each take an item: on PostgreSQL a transaction-scoped advisory
    lock on the reviewer's name; SQLite runs one writer at a time already."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(select(func.pg_advisory_xact_lock(REVIEWER_LOCK, func.hashtext(reviewer))))


# The advisory lock space of reviewers' claims (the first key of the two-key form).
REVIEWER_LOCK = 0x5245


def renew_lease(
    session: Session,
    reviewer: str,
    now: datetime,
    expires: datetime,
    exclude: Sequence[int] = (),
) -> Row[Any] | None:
    """Extend the unexpired lease the reviewer holds on a queued item, whatever its task
    (found through the partial index on claimed_by; the first in hand-out order should they
    hold several, and only it); the item, or None when they hold none."""
    held = (
        select(ReviewItem.id)
        .where(
            ReviewItem.claimed_by == reviewer,
            ReviewItem.state == "queued",
            ReviewItem.lease_expires_at > now,
            *_not_in(exclude),
        )
        .order_by(*HAND_OUT_ORDER)
        .limit(1)
        .scalar_subquery()
    )
    rows = session.execute(
        update(ReviewItem)
        # The lease conditions again on the row itself: a label of the item committed
        # after the subquery read it (the UPDATE waited on its row lock) ended the lease,
        # and PostgreSQL rechecks these on the new row, so the claim moves on instead of
        # handing back the item just labelled.
        .where(
            ReviewItem.id == held,
            ReviewItem.claimed_by == reviewer,
            ReviewItem.state == "queued",
            ReviewItem.lease_expires_at > now,
        )
        .values(lease_expires_at=expires)
        .returning(*VIEW_COLUMNS)
        .execution_options(synchronize_session=False)
    ).all()
    return rows[0] if rows else None


def _not_in(exclude: Sequence[int]) -> list[ColumnElement[bool]]:
    return [ReviewItem.task_id.not_in(list(exclude))] if exclude else []


def claimable(
    task_id: int | None, reviewer: str, now: datetime, exclude: Sequence[int] = ()
) -> list[ColumnElement[bool]]:
    """Conditions of an item the reviewer may claim: queued, its lease free or expired,
    not labelled and not skipped by them, not of a task in `exclude`."""
    conditions: list[ColumnElement[bool]] = [
        ReviewItem.state == "queued",
        or_(ReviewItem.claimed_by.is_(None), ReviewItem.lease_expires_at <= now),
        ~exists().where(ReviewLabel.item_id == ReviewItem.id, ReviewLabel.reviewer == reviewer),
        ~exists().where(ReviewSkip.item_id == ReviewItem.id, ReviewSkip.reviewer == reviewer),
    ]
    if task_id is not None:
        conditions.append(ReviewItem.task_id == task_id)
    conditions.extend(_not_in(exclude))
    return conditions


def take_next(
    session: Session,
    task_id: int | None,
    reviewer: str,
    now: datetime,
    expires: datetime,
    exclude: Sequence[int] = (),
) -> Row[Any] | None:
    """Give the reviewer the lease of the first item they may claim in hand-out order
    (HAND_OUT_ORDER: a rollback's regression items before any other, its breaching cell
    first, then oldest first; across tasks when `task_id` is None), in one statement; the
    item, or None when there is none.

    On PostgreSQL the subquery locks the row FOR UPDATE SKIP LOCKED: concurrent claimers
    skip each other's rows instead of waiting on them or taking the same one. On SQLite
    (one writer at a time) the statement runs alone."""
    first = (
        select(ReviewItem.id)
        .where(*claimable(task_id, reviewer, now, exclude))
        .order_by(*HAND_OUT_ORDER)
        .limit(1)
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    rows = session.execute(
        update(ReviewItem)
        .where(ReviewItem.id == first)
        .values(claimed_by=reviewer, lease_expires_at=expires)
        .returning(*VIEW_COLUMNS)
        .execution_options(synchronize_session=False)
    ).all()
    return rows[0] if rows else None


# What a label or a release reads of the item it locks.
LEASE_COLUMNS = (
    ReviewItem.id,
    ReviewItem.task_id,
    ReviewItem.kind,
    ReviewItem.a_is_edge,
    ReviewItem.claimed_by,
    ReviewItem.lease_expires_at,
    ReviewItem.reviews_needed,
    ReviewItem.state,
    # A regression item a block may wait on (regression priority) without a usable
    # expected answer goes to more reviewers.
    ReviewItem.layer,
    ReviewItem.priority,
)


def locked_item(session: Session, item_id: int) -> Any:
    """The item's lease and what a label needs, its row locked until the transaction ends."""
    return session.execute(
        select(*LEASE_COLUMNS).where(ReviewItem.id == item_id).with_for_update()
    ).first()


def add_label(session: Session, **values: Any) -> int:
    """Insert a label; its id."""
    return int(
        session.execute(insert(ReviewLabel).values(**values).returning(ReviewLabel.id)).scalar_one()
    )


def has_label(session: Session, item_id: int, reviewer: str) -> bool:
    """Whether the reviewer has labelled the item."""
    return (
        session.scalar(
            select(ReviewLabel.id)
            .where(ReviewLabel.item_id == item_id, ReviewLabel.reviewer == reviewer)
            .limit(1)
        )
        is not None
    )


def label_count(session: Session, item_id: int, reviewer: str) -> int:
    """How many labels the reviewer has given the item (their first and corrections)."""
    return int(
        session.scalar(
            select(func.count())
            .select_from(ReviewLabel)
            .where(ReviewLabel.item_id == item_id, ReviewLabel.reviewer == reviewer)
        )
        or 0
    )


def reopen(session: Session, item_id: int, *, reviews_needed: int) -> None:
    """Send a done item back to the queue for `reviews_needed` reviewers in all."""
    session.execute(
        update(ReviewItem)
        .where(ReviewItem.id == item_id)
        .values(state="queued", done_at=None, reviews_needed=reviews_needed)
        .execution_options(synchronize_session=False)
    )


def end_lease(
    session: Session,
    item_id: int,
    *,
    state: str | None = None,
    done_at: datetime | None = None,
    reviews_needed: int | None = None,
) -> None:
    """Free the item's lease; with a label, set where the item now stands."""
    values: dict[str, Any] = {"claimed_by": None, "lease_expires_at": None}
    if state is not None:
        values.update(state=state, done_at=done_at, reviews_needed=reviews_needed)
    session.execute(
        update(ReviewItem)
        .where(ReviewItem.id == item_id)
        .values(**values)
        .execution_options(synchronize_session=False)
    )


def item_labels(session: Session, item_id: int) -> list[ReviewLabel]:
    return list(
        session.scalars(
            select(ReviewLabel).where(ReviewLabel.item_id == item_id).order_by(ReviewLabel.id)
        )
    )


def queue_counts(
    session: Session, task_ids: list[int], now: datetime, day_start: datetime
) -> dict[int, dict[str, int]]:
    """Per task: queued items (not held), items held under an unexpired lease, labels given
    since `day_start`, and items done."""
    counts = {tid: {"queued": 0, "claimed": 0, "labelled_today": 0, "done": 0} for tid in task_ids}
    if not task_ids:
        return counts
    held = and_(ReviewItem.claimed_by.is_not(None), ReviewItem.lease_expires_at > now)
    rows = session.execute(
        select(
            ReviewItem.task_id,
            func.sum(_flag(and_(ReviewItem.state == "queued", ~held))),
            func.sum(_flag(and_(ReviewItem.state == "queued", held))),
            func.sum(_flag(ReviewItem.state == "done")),
        )
        .where(ReviewItem.task_id.in_(task_ids))
        .group_by(ReviewItem.task_id)
    )
    for tid, queued, claimed, done in rows:
        counts[tid].update(queued=int(queued or 0), claimed=int(claimed or 0), done=int(done or 0))
    labelled = session.execute(
        select(ReviewLabel.task_id, func.count())
        .where(ReviewLabel.task_id.in_(task_ids), ReviewLabel.created_at >= day_start)
        .group_by(ReviewLabel.task_id)
    )
    for tid, n in labelled:
        counts[tid]["labelled_today"] = int(n)
    return counts


def _flag(condition: ColumnElement[bool]) -> ColumnElement[int]:
    return case((condition, 1), else_=0)


def repeat_noise(
    session: Session, task_id: int, config_version: int, since: datetime, until: datetime
) -> tuple[dict[str, int], int]:
    """The task's repeat differences per field or check, and its repeat pairs, summed over
    the `all` rows of its windows with `since <= window_start < until` computed with
    `config_version` (the windows a grade reads). JSON maps, summed here (the two backends
    read JSON differently)."""
    rows = session.execute(
        select(WindowMetrics.repeat_diffs, WindowMetrics.n_repeat_pairs)
        .join(Window, Window.id == WindowMetrics.window_id)
        .where(
            Window.task_id == task_id,
            Window.config_version == config_version,
            Window.window_start >= since,
            Window.window_start < until,
            WindowMetrics.bucket == ALL,
            WindowMetrics.n_repeat_pairs > 0,
        )
    )
    diffs: dict[str, int] = {}
    pairs = 0
    for counts, n in rows:
        pairs += int(n)
        for name, count in (counts or {}).items():
            diffs[str(name)] = diffs.get(str(name), 0) + int(count)
    return diffs, pairs


def version_created(session: Session, task_id: int, version: int) -> datetime | None:
    """When the task's config version was made."""
    return session.scalar(
        select(TaskConfigVersion.created_at).where(
            TaskConfigVersion.task_id == task_id, TaskConfigVersion.version == version
        )
    )


def shifted_at(session: Session, task_id: int) -> datetime | None:
    """When the task's inputs last shifted (an input_shift rollback), if they did."""
    return session.scalar(select(Task.shifted_at).where(Task.id == task_id))


# --- Rollbacks waiting on their regression items (the blocks they left, the items they
# queued): what the queue overview counts, and what the eval sets' regression gate reads.


class Block(NamedTuple):
    """An active block: the model, the rollback that blocked it, and since when (the
    decision's time: the clock of the pass that rolled back; else the block's own)."""

    model: str
    decision_id: int | None
    since: datetime


def active_blocks(session: Session, task_id: int) -> list[Block]:
    """The task's blocks not lifted, by model."""
    rows = session.execute(
        select(
            BlockedModel.model,
            BlockedModel.decision_id,
            func.coalesce(Decision.created_at, BlockedModel.blocked_at),
        )
        .outerjoin(Decision, Decision.id == BlockedModel.decision_id)
        .where(BlockedModel.task_id == task_id, BlockedModel.lifted_at.is_(None))
        .order_by(BlockedModel.model)
    )
    return [Block(model, decision_id, since) for model, decision_id, since in rows]


def _queued_by(task_id: int, since: int | None) -> list[ColumnElement[bool]]:
    """The task's regression review items queued by rollback `since` or a later one (every
    regression review item when `since` is None)."""
    where = [ReviewItem.task_id == task_id, ReviewItem.layer == "regression"]
    if since is not None:
        where.append(ReviewItem.provenance["decision_id"].as_integer() >= since)
    return where


def rollback_items(session: Session, task_id: int, since: int | None) -> list[ReviewItem]:
    """The task's regression review items queued by rollback `since` or a later one (every
    regression review item when `since` is None), oldest first."""
    return list(
        session.scalars(
            select(ReviewItem).where(*_queued_by(task_id, since)).order_by(ReviewItem.id)
        )
    )


def rollback_counts(session: Session, task_id: int, since: int | None) -> tuple[int, int]:
    """(done, all) of the items `rollback_items` reads, counted in SQL."""
    done, total = session.execute(
        select(
            func.count().filter(ReviewItem.state == "done"),
            func.count(),
        ).where(*_queued_by(task_id, since))
    ).one()
    return int(done or 0), int(total or 0)


# --- Regression priority: an item keeps PRIORITY_BREACHING or PRIORITY_REGRESSION while an
# active block may still wait on it; then it is handed out (and read by each pass) as any
# other item.


def drop_priority(session: Session, item_ids: Sequence[int]) -> int:
    """Give the items the priority of any other item (PRIORITY_OTHER): no block waits on
    them any more (the regression set holds their input). How many changed."""
    changed = 0
    for start in range(0, len(item_ids), 1000):
        changed += _lower(session, [ReviewItem.id.in_(list(item_ids[start : start + 1000]))])
    return changed


def restore_priority(session: Session, item_ids: Sequence[int]) -> int:
    """Give regression items whose input left the regression set again (a correction
    reopened them, or left them without a usable answer) the regression priority back: a
    block waits on them again, and each pass reads them. How many changed."""
    changed = 0
    for start in range(0, len(item_ids), 1000):
        result = session.execute(
            update(ReviewItem)
            .where(
                ReviewItem.id.in_(list(item_ids[start : start + 1000])),
                ReviewItem.layer == "regression",
                ReviewItem.priority == PRIORITY_OTHER,
            )
            .values(priority=PRIORITY_REGRESSION)
        )
        changed += int(getattr(result, "rowcount", 0) or 0)
    return changed


def drop_unwaited_priority(session: Session, task_id: int) -> int:
    """Give the task's regression items that no active block of the task waits on the
    priority of any other item (PRIORITY_OTHER), whatever their state, so a lifted block's
    leftovers (or a rollback's that blocked no model) never queue before a sample a live
    block waits on. A block waits on the items of its rollback and of later ones
    (`_queued_by`); a block naming no rollback on every one. How many changed."""
    decisions = [b.decision_id for b in active_blocks(session, task_id)]
    if None in decisions:
        return 0
    where = [ReviewItem.task_id == task_id, ReviewItem.layer == "regression"]
    if decisions:
        rollback = ReviewItem.provenance["decision_id"].as_integer()
        earliest = min(d for d in decisions if d is not None)
        where.append(or_(rollback.is_(None), rollback < earliest))
    return _lower(session, where)


def _lower(session: Session, where: list[ColumnElement[bool]]) -> int:
    result = session.execute(
        update(ReviewItem)
        .where(*where, ReviewItem.priority < PRIORITY_OTHER)
        .values(priority=PRIORITY_OTHER)
        .execution_options(synchronize_session=False)
    )
    return int(getattr(result, "rowcount", 0) or 0)
