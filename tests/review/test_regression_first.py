"""The queue hands items out by priority, then oldest first: a rollback's breaching-cell
items, then the rest of its regression sample, then every other item — across tasks when
the claim names none, within the task when it names one."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from controlplane.db import get_engine, session_scope
from controlplane.models import Decision, ReviewItem, Task
from controlplane.models.review import PRIORITY_BREACHING, PRIORITY_OTHER, PRIORITY_REGRESSION
from controlplane.review import actions
from controlplane.rollout import repository as rollout
from controlplane.rollout.actions import unblock
from controlplane.rollout.configs import apply_config
from tests.conftest import TICKET_TASK
from tests.review.queuedata import T0, add_items

LEASE = 600.0


def test_regression_items_go_first_breaching_cell_first(db_url: str) -> None:
    engine = get_engine(db_url)
    with session_scope(engine) as session:
        apply_config(session, TICKET_TASK, actor="test")
        apply_config(session, {**TICKET_TASK, "task": "other_task"}, actor="test")
    regression = {"layer": "regression", "reason": "regression"}
    old = add_items(engine, "ticket_classify", 2, priority=PRIORITY_OTHER)
    [other_sample] = add_items(
        engine, "other_task", 1, start=10, priority=PRIORITY_REGRESSION, **regression
    )
    [other_hot] = add_items(
        engine, "other_task", 1, start=11, priority=PRIORITY_BREACHING, **regression
    )
    [sample] = add_items(
        engine, "ticket_classify", 1, start=2, priority=PRIORITY_REGRESSION, **regression
    )
    [hot] = add_items(
        engine, "ticket_classify", 1, start=3, priority=PRIORITY_BREACHING, **regression
    )

    def hand_out(task: str | None, at: float, who: str) -> list[int]:
        """Claims by new reviewers (one lease each) until the queue offers nothing."""
        out = []
        for n in range(10):
            now = T0 + timedelta(seconds=at + n)
            view = actions.claim(engine, task, f"{who}-{n}", now, lease_seconds=LEASE)
            if view is None:
                return out
            out.append(view["id"])
        raise AssertionError("the queue never ran dry")

    # Any task: priority first, then the oldest, whichever task.
    assert hand_out(None, 0, "any") == [other_hot, hot, other_sample, sample, *old]
    # One task (once the leases above expired): its own items in the same order.
    assert hand_out("ticket_classify", 2 * LEASE, "one") == [hot, sample, *old]
    # A reviewer holding a lease gets it back, whatever waits ahead of it now.
    held = actions.claim(engine, None, "one-0", T0 + timedelta(seconds=2 * LEASE + 20))
    assert held is not None and held["id"] == hot


def test_a_lifted_block_s_items_queue_as_any_other_once_no_block_waits_on_them(
    db_url: str,
) -> None:
    """A block waits on the regression items of its rollback and of later ones: lifting one
    lowers to PRIORITY_OTHER only the items no block left still waits on."""
    engine = get_engine(db_url)
    with session_scope(engine) as session:
        apply_config(session, TICKET_TASK, actor="test")
        task = session.scalars(select(Task).where(Task.name == "ticket_classify")).one()
        decisions = []
        for model in ("small@3", "small@4", "small@5"):
            decision = Decision(
                task_id=task.id, action="rollback", actor="policy", reason="breach", evidence={}
            )
            session.add(decision)
            session.flush()
            rollout.block(session, task, model, decision.id)
            decisions.append(decision.id)
    items = [
        add_items(
            engine,
            "ticket_classify",
            1,
            start=k,
            layer="regression",
            reason="regression",
            priority=PRIORITY_BREACHING,
            provenance={"decision_id": decision},
        )[0]
        for k, decision in enumerate(decisions)
    ]

    def lift(model: str) -> list[int]:
        unblock(engine, "ticket_classify", model=model, actor="sre", reason="r", force=True)
        with session_scope(engine) as session:
            found = session.scalars(
                select(ReviewItem.priority).where(ReviewItem.id.in_(items)).order_by(ReviewItem.id)
            )
            return list(found)

    # small@3's block (the first rollback) still waits on every sample.
    assert lift("small@4") == [PRIORITY_BREACHING] * 3
    # small@5's waits on the third rollback's only.
    assert lift("small@3") == [PRIORITY_OTHER, PRIORITY_OTHER, PRIORITY_BREACHING]
    assert lift("small@5") == [PRIORITY_OTHER] * 3
