"""A task whose config asks for two reviewers per item queues items that need two different
reviewers, both from the window draw and from a rollback's regression queueing: through the
queue's own actions, the first reviewer's label leaves the item waiting, it is offered to a
second reviewer and never to the first again, and it is done after the second."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select

from controlplane.catalog.service import task_runtimes
from controlplane.db import session_scope
from controlplane.models import ReviewItem, Task
from controlplane.review import actions
from controlplane.review.regression import queue_regression
from controlplane.rollout.configs import apply_config
from controlplane.scheduler import run_pass
from tests.conftest import Api, make_api, make_result
from tests.windowdata import post_all

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
WINDOW, LATENESS = 60, 30
TASK = "pair_review"
LEASE = 600.0


def conflicts(k: int, n: int) -> list[dict[str, Any]]:
    """n conflicting results in window k (every conflict's payload is kept)."""
    return [
        make_result(
            request_id=f"{TASK}-{k}-{i}",
            task=TASK,
            ts=(T0 + timedelta(seconds=k * WINDOW + i)).isoformat(),
            input={"text": f"help with order {k}-{i}"},
            edge={"output": "exchange", "confidence": 0.9, "model": "small@3"},
            cloud={"output": "refund", "model": "large@7"},
        )
        for i in range(n)
    ]


@pytest.fixture
def api(db_url: str) -> Iterator[Api]:
    for api in make_api(db_url):
        with session_scope(api.engine) as session:
            apply_config(
                session,
                {
                    "task": TASK,
                    "comparator": {"kind": "label", "labels": ["refund", "exchange"]},
                    "window_seconds": WINDOW,
                    "allowed_lateness_seconds": LATENESS,
                    "review": {"reviewers_per_item": 2, "quota_per_window": 3},
                },
                actor="test",
            )
        yield api


def _items(api: Api) -> list[ReviewItem]:
    with session_scope(api.engine) as session:
        tid = session.scalar(select(Task.id).where(Task.name == TASK))
        return list(session.scalars(select(ReviewItem).where(ReviewItem.task_id == tid)))


def _label_all(api: Api, reviewer: str, at: float) -> dict[int, dict[str, Any]]:
    """Claim and label (the same verdict every time) until the queue offers nothing."""
    answers: dict[int, dict[str, Any]] = {}
    for step in range(50):
        now = T0 + timedelta(hours=1, seconds=at + step)
        view = actions.claim(api.engine, TASK, reviewer, now, lease_seconds=LEASE)
        if view is None:
            return answers
        assert view["id"] not in answers, f"{reviewer} was offered item {view['id']} again"
        answers[view["id"]] = actions.label(
            api.engine, view["id"], reviewer, verdict="a_correct", now=now
        )
    raise AssertionError("the queue never ran dry")


def test_items_of_a_two_reviewer_task_need_two_different_reviewers(api: Api) -> None:
    post_all(api, conflicts(0, 6) + conflicts(1, 4))
    # Window 0 closes: the sampler draws its quota.
    report = run_pass(api.engine, T0 + timedelta(seconds=WINDOW + LATENESS))
    assert report.failed == [] and report.sampled == 3
    # A rollback's breaching window 1: every result queued for the regression layer.
    with session_scope(api.engine) as session:
        task = session.scalars(select(Task).where(Task.name == TASK)).one()
        config = task_runtimes(session, {TASK})[TASK].config
        queued = queue_regression(
            session,
            task,
            config,
            decision_id=1,
            rule="agreement >= 0.9",
            cell="all",
            ranges=[(T0 + timedelta(seconds=WINDOW), T0 + timedelta(seconds=2 * WINDOW))],
        )
    assert queued == 4
    items = _items(api)
    assert {i.layer for i in items} == {"boundary", "regression"}
    assert len(items) == 7
    assert all(i.reviews_needed == 2 and i.state == "queued" for i in items)

    # The first reviewer labels every item once; each keeps waiting for a second reviewer,
    # and none is offered to the first again.
    first = _label_all(api, "ann", at=0)
    assert set(first) == {i.id for i in items}
    for answer in first.values():
        assert answer["state"] == "queued" and answer["reviews_needed"] == 2
    assert all(i.state == "queued" for i in _items(api))

    # A second reviewer is offered each of them; their label finishes it.
    second = _label_all(api, "bob", at=100)
    assert set(second) == {i.id for i in items}
    for answer in second.values():
        assert answer["state"] == "done" and answer["reviewers"] == 2
    assert all(i.state == "done" for i in _items(api))
    for reviewer in ("ann", "bob", "cy"):
        now = T0 + timedelta(hours=2)
        assert actions.claim(api.engine, TASK, reviewer, now, lease_seconds=LEASE) is None
