"""All SQL of eval sets: review items waiting to be backfilled, their labels, eval items by
task and layer, stored runs."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func, or_, select, update
from sqlalchemy.orm import Session

from controlplane.db import dialect_insert
from controlplane.models import Result, Task
from controlplane.models.evalsets import EvalItem, EvalLayerDigest, EvalRun
from controlplane.models.review import PRIORITY_OTHER, ReviewItem, ReviewLabel
from controlplane.models.rollout import BlockedModel


def tasks_by_name(session: Session, name: str | None) -> list[Task]:
    query = select(Task).order_by(Task.name)
    if name is not None:
        query = query.where(Task.name == name)
    return list(session.scalars(query))


def done_items_not_backfilled(
    session: Session,
    task_id: int,
    layer: str | None,
    item_ids: Sequence[int] | None = None,
    *,
    waited: bool = False,
) -> list[ReviewItem]:
    """Done review items of the task (of those ids; with `waited`, only those a block may
    wait on: priority below PRIORITY_OTHER) with no eval item of their own in their layer
    yet, oldest first (an item a rollback moved to `regression` after it was backfilled
    into another layer is waiting again: the regression layer must hold it too)."""
    query = (
        select(ReviewItem)
        .where(
            ReviewItem.task_id == task_id,
            ReviewItem.state == "done",
            ~select(EvalItem.seq)
            .where(EvalItem.review_item_id == ReviewItem.id, EvalItem.layer == ReviewItem.layer)
            .correlate(ReviewItem)
            .exists(),
        )
        .order_by(ReviewItem.id)
    )
    if layer is not None:
        query = query.where(ReviewItem.layer == layer)
    if item_ids is not None:
        query = query.where(ReviewItem.id.in_(list(item_ids)))
    if waited:
        query = query.where(ReviewItem.priority < PRIORITY_OTHER)
    return list(session.scalars(query))


def tasks_waiting_for_regression(session: Session) -> list[Task]:
    """The tasks with an active block and a done `regression` review item a block may wait
    on (priority below PRIORITY_OTHER) that their eval set does not hold (it may still wait
    for a usable expected answer), by id. The gate reads the set only for a blocked model."""
    blocked = (
        select(BlockedModel.id)
        .where(BlockedModel.task_id == ReviewItem.task_id, BlockedModel.lifted_at.is_(None))
        .correlate(ReviewItem)
        .exists()
    )
    waiting = (
        select(ReviewItem.task_id)
        .where(
            ReviewItem.state == "done",
            # The regression items, read through the (state, priority, id) index.
            ReviewItem.priority < PRIORITY_OTHER,
            ReviewItem.layer == "regression",
            blocked,
            ~select(EvalItem.seq)
            .where(EvalItem.review_item_id == ReviewItem.id, EvalItem.layer == ReviewItem.layer)
            .correlate(ReviewItem)
            .exists(),
        )
        .distinct()
    )
    return list(session.scalars(select(Task).where(Task.id.in_(waiting)).order_by(Task.id)))


def blocked_tasks(session: Session) -> list[Task]:
    """The tasks with an active block, by id."""
    blocked = (
        select(BlockedModel.id)
        .where(BlockedModel.task_id == Task.id, BlockedModel.lifted_at.is_(None))
        .correlate(Task)
        .exists()
    )
    return list(session.scalars(select(Task).where(blocked).order_by(Task.id)))


def blocking_decision(session: Session, task_id: int, model: str) -> int | None:
    """The decision (rollback) behind the model's active block, when it names one."""
    return session.scalar(
        select(BlockedModel.decision_id)
        .where(
            BlockedModel.task_id == task_id,
            BlockedModel.model == model,
            BlockedModel.lifted_at.is_(None),
        )
        .order_by(BlockedModel.id.desc())
        .limit(1)
    )


def edge_models_since(session: Session, task_id: int, since: datetime, newest: int) -> set[str]:
    """The edge models of the task's newest `newest` results at or after `since` (a bounded
    read through the (task_id, ts) index, however long ago the block was)."""
    latest = (
        select(Result.edge_model.label("model"))
        .where(Result.task_id == task_id, Result.ts >= since)
        .order_by(Result.ts.desc())
        .limit(newest)
        .subquery()
    )
    return {m for m in session.scalars(select(latest.c.model).distinct()) if m is not None}


def layer_ids(session: Session, task_id: int, layer: str) -> set[str]:
    return set(
        session.scalars(
            select(EvalItem.item_id).where(EvalItem.task_id == task_id, EvalItem.layer == layer)
        )
    )


def labels_of(session: Session, item_ids: Sequence[int]) -> dict[int, list[ReviewLabel]]:
    """Every label of the items, by item, oldest first."""
    out: dict[int, list[ReviewLabel]] = defaultdict(list)
    for start in range(0, len(item_ids), 1000):
        chunk = list(item_ids[start : start + 1000])
        for label in session.scalars(
            select(ReviewLabel).where(ReviewLabel.item_id.in_(chunk)).order_by(ReviewLabel.id)
        ):
            out[label.item_id].append(label)
    return out


def outdated_items(
    session: Session, task_id: int, layer: str | None
) -> list[tuple[EvalItem, ReviewItem]]:
    """The task's eval items (of the layer) whose review item changed since they were made:
    it is not done any more (a correction reopened it), or it has labels the item was not
    made from (labels are never deleted: a count that differs is a label added since)."""
    labels = (
        select(func.count(ReviewLabel.id))
        .where(ReviewLabel.item_id == ReviewItem.id)
        .correlate(ReviewItem)
        .scalar_subquery()
    )
    if session.get_bind().dialect.name == "postgresql":
        made_from = func.jsonb_array_length(EvalItem.provenance["labels"])
    else:
        made_from = func.json_array_length(EvalItem.provenance, "$.labels")
    query = (
        select(EvalItem, ReviewItem)
        .join(ReviewItem, ReviewItem.id == EvalItem.review_item_id)
        .where(
            EvalItem.task_id == task_id,
            or_(ReviewItem.state != "done", labels != func.coalesce(made_from, 0)),
        )
        .order_by(EvalItem.seq)
    )
    if layer is not None:
        query = query.where(EvalItem.layer == layer)
    return [(row[0], row[1]) for row in session.execute(query)]


def existing_ids(session: Session, ids: Sequence[str], layer: str) -> set[str]:
    """Those of the ids the layer already holds (an input enters each layer once)."""
    found: set[str] = set()
    for start in range(0, len(ids), 1000):
        chunk = list(ids[start : start + 1000])
        found.update(
            session.scalars(
                select(EvalItem.item_id).where(EvalItem.layer == layer, EvalItem.item_id.in_(chunk))
            )
        )
    return found


def insert_item(session: Session, values: dict[str, Any]) -> bool:
    """Insert one eval item unless its layer holds its id (a concurrent backfill got there
    first)."""
    statement = (
        dialect_insert(session, EvalItem)
        .values(**values)
        .on_conflict_do_nothing(index_elements=["item_id", "layer"])
        .returning(EvalItem.seq)
    )
    return session.execute(statement).first() is not None


def items(
    session: Session,
    task_id: int,
    layer: str,
    *,
    after: int = 0,
    limit: int | None = None,
) -> list[EvalItem]:
    """A layer's items in export order (`seq`), after a cursor."""
    query = (
        select(EvalItem)
        .where(EvalItem.task_id == task_id, EvalItem.layer == layer, EvalItem.seq > after)
        .order_by(EvalItem.seq)
    )
    if limit is not None:
        query = query.limit(limit)
    return list(session.scalars(query))


def items_by_ids(session: Session, ids: Sequence[str]) -> list[tuple[EvalItem, str]]:
    """Eval items with those ids and their task's name."""
    out: list[tuple[EvalItem, str]] = []
    for start in range(0, len(ids), 1000):
        chunk = list(ids[start : start + 1000])
        rows = session.execute(
            select(EvalItem, Task.name)
            .join(Task, Task.id == EvalItem.task_id)
            .where(EvalItem.item_id.in_(chunk))
        ).all()
        out.extend((item, name) for item, name in rows)
    return out


def counts(session: Session) -> list[tuple[str, int, str, int]]:
    """(task name, task id, layer, item count) of every non-empty layer, by task and layer."""
    rows = session.execute(
        select(Task.name, Task.id, EvalItem.layer, func.count())
        .join(Task, Task.id == EvalItem.task_id)
        .group_by(Task.name, Task.id, EvalItem.layer)
        .order_by(Task.name, EvalItem.layer)
    ).all()
    return [(name, tid, layer, n) for name, tid, layer, n in rows]


def share_task(session: Session, task_id: int) -> None:
    """Hold the task's row against deletion or a change of its key for this transaction (FOR
    KEY SHARE: it waits only for a writer holding it for update)."""
    session.execute(
        select(Task.id).where(Task.id == task_id).with_for_update(read=True, key_share=True)
    )


def lock_digest(session: Session, task_id: int, layer: str) -> None:
    """Take the layer's digest row (made when missing) for this transaction: writers of one
    layer take turns, and each reads the items the one before it committed."""
    session.execute(
        dialect_insert(session, EvalLayerDigest)
        .values(task_id=task_id, layer=layer, sha256=None, n_items=0)
        .on_conflict_do_nothing(index_elements=["task_id", "layer"])
    )
    session.execute(
        select(EvalLayerDigest.task_id)
        .where(EvalLayerDigest.task_id == task_id, EvalLayerDigest.layer == layer)
        .with_for_update()
    )


def keep_digest(session: Session, task_id: int, layer: str, sha256: str, n_items: int) -> None:
    """Store the layer's digest (its row locked by `lock_digest` in this transaction)."""
    session.execute(
        update(EvalLayerDigest)
        .where(EvalLayerDigest.task_id == task_id, EvalLayerDigest.layer == layer)
        .values(sha256=sha256, n_items=n_items)
    )


def offer_digest(session: Session, task_id: int, layer: str, sha256: str, n_items: int) -> None:
    """Store a digest a reader computed, unless the layer has a row: a writer made one (and
    keeps it), so this reader's items may be older than the layer's."""
    session.execute(
        dialect_insert(session, EvalLayerDigest)
        .values(task_id=task_id, layer=layer, sha256=sha256, n_items=n_items)
        .on_conflict_do_nothing(index_elements=["task_id", "layer"])
    )


def digest_of(session: Session, task_id: int, layer: str) -> tuple[str, int] | None:
    """(sha256, item count) kept for the layer, or None (never kept, or being rewritten)."""
    row = session.execute(
        select(EvalLayerDigest.sha256, EvalLayerDigest.n_items).where(
            EvalLayerDigest.task_id == task_id, EvalLayerDigest.layer == layer
        )
    ).first()
    if row is None or row[0] is None:
        return None
    return str(row[0]), int(row[1])


def add_run(session: Session, run: EvalRun) -> EvalRun:
    session.add(run)
    session.flush()
    return run


def runs(
    session: Session, task_id: int, *, model: str | None = None, layer: str | None = None
) -> list[EvalRun]:
    """Stored runs of the task, newest first."""
    query = select(EvalRun).where(EvalRun.task_id == task_id).order_by(EvalRun.id.desc())
    if model is not None:
        query = query.where(EvalRun.model == model)
    if layer is not None:
        query = query.where(EvalRun.layer == layer)
    return list(session.scalars(query))


def hidden_orders(session: Session, review_item_ids: Sequence[int]) -> dict[int, bool]:
    """Review item id → whether its A was the edge's answer (the order its reviewers saw),
    for the blind form of the eval items that came from them."""
    out: dict[int, bool] = {}
    for start in range(0, len(review_item_ids), 1000):
        chunk = list(review_item_ids[start : start + 1000])
        rows = session.execute(
            select(ReviewItem.id, ReviewItem.a_is_edge).where(ReviewItem.id.in_(chunk))
        )
        out.update((item_id, a_is_edge) for item_id, a_is_edge in rows)
    return out
